//! `dsh-mcp --listen`: the real binary over Streamable HTTP, driven by the
//! official Rust SDK's client (rmcp) and by plain HTTP requests where a
//! test needs what a client library hides (the status of a refused
//! request, a dropped connection, a session id after its end).
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BOUND: Duration = Duration::from_secs(60);
const TOKEN: &str = "test-token-0123456789abcdef";

/// The `dsh-mcp` the servers run: `DSH_TEST_MCP_BINARY` when set (a
/// release build, for `scale_sessions_over_http_and_stdio`'s figures),
/// else this build's.
fn mcp_binary() -> PathBuf {
    std::env::var_os("DSH_TEST_MCP_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_dsh-mcp")),
        PathBuf::from,
    )
}

/// The real `dsh-mcp --listen 127.0.0.1:0` on `workspace`, once it said
/// where it listens.
struct Server {
    _child: Child,
    /// `http://127.0.0.1:PORT` (or `https://localhost:PORT`).
    base: String,
}

impl Server {
    async fn start(workspace: &Path, extra: &[&str]) -> Server {
        Server::start_as(workspace, extra, "http://127.0.0.1").await
    }

    async fn start_as(workspace: &Path, extra: &[&str], authority: &str) -> Server {
        Server::launch(workspace, extra, authority, &[]).await
    }

    /// With these variables set in the server's environment.
    async fn start_env(workspace: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Server {
        Server::launch(workspace, extra, "http://127.0.0.1", env).await
    }

    async fn launch(
        workspace: &Path,
        extra: &[&str],
        authority: &str,
        env: &[(&str, &Path)],
    ) -> Server {
        // In the environment: the shells of danger-full-access could read
        // a token file (the server refuses one).
        let mut child = Command::new(mcp_binary())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--workspace")
            .arg(workspace)
            .args(extra)
            .env_remove("DSH_HOME")
            .env("DSH_TOKEN", TOKEN)
            .env_remove("CARGO_TARGET_DIR")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = tokio::time::timeout(BOUND, async {
            loop {
                let line = lines
                    .next_line()
                    .await
                    .unwrap()
                    .expect("the server said where it listens");
                eprintln!("{line}");
                if let Some(rest) = line.strip_prefix("dsh-mcp: listening on ") {
                    let addr = rest.split("://").nth(1).unwrap().trim_end_matches("/mcp");
                    return addr.rsplit(':').next().unwrap().to_owned();
                }
            }
        })
        .await
        .expect("the server started");
        // The rest of its log, to the test's output.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{line}");
            }
        });
        Server {
            _child: child,
            base: format!("{authority}:{port}"),
        }
    }

    fn mcp(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

/// A reqwest client (rustls with ring, trusting `ca` when given).
fn http_client(ca: Option<&str>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder();
    if let Some(ca) = ca {
        builder =
            builder.add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

/// The SDK's client, connected to `server` with `token`.
async fn sdk_client(url: &str, token: &str, ca: Option<&str>) -> RunningService<RoleClient, ()> {
    let transport = StreamableHttpClientTransport::with_client(
        http_client(ca),
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    tokio::time::timeout(BOUND, ().serve(transport))
        .await
        .expect("initialize answered")
        .unwrap()
}

fn arguments(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    name: &'static str,
    args: Value,
) -> CallToolResult {
    tokio::time::timeout(
        BOUND,
        client.call_tool(CallToolRequestParams::new(name).with_arguments(arguments(args))),
    )
    .await
    .expect("the call was answered")
    .unwrap()
}

async fn bash(client: &RunningService<RoleClient, ()>, command: &str) -> String {
    let result = call(client, "bash", json!({ "command": command })).await;
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    text(&result)
}

/// Plain HTTP: one session, its requests built by hand.
struct Raw {
    http: reqwest::Client,
    url: String,
    token: String,
    session: Option<String>,
}

/// A response: its status, its `Mcp-Session-Id` and its body.
struct Answer {
    status: u16,
    session: Option<String>,
    content_type: Option<String>,
    body: String,
}

impl Answer {
    /// The last JSON-RPC message of an SSE or JSON body.
    fn message(&self) -> Value {
        common::last_message(&self.body)
    }

    fn tool_text(&self) -> String {
        let message = self.message();
        message["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no tool result: {message}"))
            .to_owned()
    }
}

impl Raw {
    fn new(server: &Server) -> Raw {
        Raw::with_client(server, http_client(None))
    }

    /// A session sent through `http` (a client that others may share).
    fn with_client(server: &Server, http: reqwest::Client) -> Raw {
        Raw {
            http,
            url: server.mcp(),
            token: TOKEN.to_owned(),
            session: None,
        }
    }

    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .request(method, &self.url)
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18");
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session);
        }
        request
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = tokio::time::timeout(BOUND, request.send())
            .await
            .expect("answered")
            .unwrap();
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = tokio::time::timeout(BOUND, response.text())
            .await
            .expect("a whole body")
            .unwrap();
        Answer {
            status,
            session,
            content_type,
            body,
        }
    }

    async fn post(&self, body: Value) -> Answer {
        self.send(self.request(reqwest::Method::POST).body(body.to_string()))
            .await
    }

    /// Opens a session (initialize, then initialized).
    async fn initialize(&mut self) -> Answer {
        let answer = self
            .post(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
            )
            .await;
        if answer.status == 200 {
            self.session = answer.session.clone();
            let note = self
                .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await;
            assert_eq!(note.status, 202, "{}", note.body);
        }
        answer
    }

    async fn bash(&self, id: u64, command: &str) -> Answer {
        self.post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": command}}}))
            .await
    }

    async fn delete(&self) -> Answer {
        self.send(self.request(reqwest::Method::DELETE)).await
    }

    /// A `str_replace_editor` call.
    async fn editor(&self, id: u64, arguments: Value) -> Answer {
        self.post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "str_replace_editor", "arguments": arguments}}))
            .await
    }

    /// This session's `Raw`, for the session `id` (a fork's, say).
    fn with_session(&self, id: &str) -> Raw {
        Raw {
            http: self.http.clone(),
            url: self.url.clone(),
            token: self.token.clone(),
            session: Some(id.to_owned()),
        }
    }

    /// A harness endpoint: `method` on `path` (beside `/mcp`), with the
    /// token unless `token` is false, with `body` as JSON when given.
    async fn harness(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        token: bool,
    ) -> Answer {
        let url = format!("{}{path}", self.url.trim_end_matches("/mcp"));
        let mut request = self.http.request(method, url);
        if token {
            request = request.header("Authorization", format!("Bearer {}", self.token));
        }
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(body.to_string());
        }
        self.send(request).await
    }
}

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    (dir, ws)
}

/// Waits until process `pid` is gone (or a zombie no one reaps).
async fn wait_gone(pid: u32) {
    assert!(common::gone(pid as i32).await, "process {pid} still runs");
}

/// The numbers of the `pid=N` lines of `text`.
fn pids_in(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| l.strip_prefix("pid="))
        .map(|n| n.trim().parse().unwrap())
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(')').next().unwrap().trim_start().starts_with('Z'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_uses_both_tools_over_http() {
    let (_dir, ws) = workspace();
    let server = Server::start(&ws, &[]).await;
    let client = sdk_client(&server.mcp(), TOKEN, None).await;

    let info = client.peer_info().expect("the server introduced itself");
    assert_eq!(info.server_info.as_ref().unwrap().name, "dsh-mcp");
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["bash", "str_replace_editor"]);

    // The session's one persistent shell keeps its state.
    assert_eq!(bash(&client, "pwd").await, ws.display().to_string());
    assert_eq!(bash(&client, "cd /tmp && export X=kept").await, "");
    assert_eq!(
        bash(&client, "echo $PWD $X; false").await,
        "/tmp kept\n[exit code: 1]"
    );

    let file = ws.join("notes.txt");
    let path = file.to_str().unwrap();
    let r = call(
        &client,
        "str_replace_editor",
        json!({"command": "create", "path": path, "file_text": "one\ntwo\n"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = call(
        &client,
        "str_replace_editor",
        json!({"command": "str_replace", "path": path, "old_str": "two", "new_str": "three"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\nthree\n");
    assert_eq!(bash(&client, &format!("cat {path}")).await, "one\nthree");
    // An editor error is a tool result the model reads.
    let r = call(
        &client,
        "str_replace_editor",
        json!({"command": "view", "path": "relative"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("not an absolute path"), "{}", text(&r));

    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_isolated_and_one_long_call_does_not_hold_another() {
    let (_dir, ws) = workspace();
    let server = Server::start(&ws, &[]).await;
    let a = sdk_client(&server.mcp(), TOKEN, None).await;
    let b = sdk_client(&server.mcp(), TOKEN, None).await;

    assert_eq!(
        bash(&a, "cd /tmp && export X=a && echo $$ > $OLDPWD/a.pid").await,
        ""
    );
    // B's shell is another: its own directory, its own variables.
    assert_eq!(
        bash(&b, "echo $PWD ${X-unset}; echo $$ > b.pid").await,
        format!("{} unset", ws.display())
    );
    assert_eq!(bash(&a, "echo $PWD $X").await, "/tmp a");
    let pid_a = std::fs::read_to_string(ws.join("a.pid")).unwrap();
    let pid_b = std::fs::read_to_string(ws.join("b.pid")).unwrap();
    assert_ne!(pid_a, pid_b);

    // A 4 s call in A: B's calls are answered while it still runs.
    let long = tokio::spawn(async move {
        let r = bash(&a, "sleep 4; echo slept").await;
        (a, r)
    });
    let marker = ws.join("a.pid");
    for i in 0..3 {
        assert_eq!(bash(&b, &format!("echo {i}")).await, i.to_string());
    }
    assert!(
        !long.is_finished(),
        "B's three calls were answered only after A's 4 s call"
    );
    assert!(marker.exists());
    let (a, r) = tokio::time::timeout(BOUND, long).await.unwrap().unwrap();
    assert_eq!(r, "slept");
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

/// A `sleep` argument no other process has: its processes are found by it
/// in `/proc`, whatever PID namespace they are in.
fn unique_sleep() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "3{}.{}{:03}",
        std::process::id() % 1000,
        NEXT.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_millis()
    )
}

/// The live processes running `sleep ARG`.
fn sleeping(arg: &str) -> Vec<u32> {
    let wanted = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.ends_with(wanted.as_bytes()) && alive(*pid))
        })
        .collect()
}

/// Waits until no process runs `sleep ARG` (each found ends: an event).
async fn wait_no_sleep(arg: &str) {
    for pid in sleeping(arg) {
        assert!(common::gone(pid as i32).await, "sleep {arg} still runs");
    }
}

/// DELETE in `mode`: the shell's background job, a double fork and (where
/// `setsid_reached`) a process in a session of its own end; another
/// session's processes stay; the id then gets 404.
async fn delete_ends_what_the_session_started(mode: &str, setsid_reached: bool) {
    let (_dir, ws) = workspace();
    let server = Server::start(&ws, &["--sandbox", mode]).await;
    let mut raw = Raw::new(&server);
    assert_eq!(raw.initialize().await.status, 200);
    let mut other = Raw::new(&server);
    assert_eq!(other.initialize().await.status, 200);

    let (job, fork, own) = (unique_sleep(), unique_sleep(), unique_sleep());
    let mut command = format!("sleep {job} & (sleep {fork} &)");
    if setsid_reached {
        command.push_str(&format!("; setsid sleep {own} &"));
    }
    assert_eq!(raw.bash(1, &command).await.status, 200);
    let bystander = unique_sleep();
    assert_eq!(
        other.bash(1, &format!("sleep {bystander} &")).await.status,
        200
    );
    let mut ours = vec![&job, &fork];
    if setsid_reached {
        ours.push(&own);
    }
    let deadline = Instant::now() + BOUND;
    while ours
        .iter()
        .chain([&&bystander])
        .any(|arg| sleeping(arg).is_empty())
    {
        assert!(Instant::now() < deadline, "the sleeps did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let deleted = raw.delete().await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    for arg in &ours {
        wait_no_sleep(arg).await;
    }
    let after = raw.bash(2, "touch ran-after-delete").await;
    assert_eq!(after.status, 404, "{}", after.body);
    assert!(!ws.join("ran-after-delete").exists());
    // A second DELETE finds no session.
    let again = raw.delete().await;
    assert_eq!(again.status, 404, "{}", again.body);
    // The other session and its processes are untouched.
    assert_eq!(sleeping(&bystander).len(), 1);
    assert_eq!(other.bash(2, "echo still").await.tool_text(), "still");
    assert_eq!(other.delete().await.status / 100, 2);
    wait_no_sleep(&bystander).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_the_sessions_processes_and_its_id_gets_404() {
    // Unconfined, the terminal session's processes are found in /proc; one
    // that left it with setsid is out of reach (as over stdio).
    delete_ends_what_the_session_started("danger-full-access", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_a_confined_sessions_whole_namespace() {
    delete_ends_what_the_session_started("workspace-write", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_cancels_its_call() {
    let (_dir, ws) = workspace();
    let server = Server::start(&ws, &[]).await;
    let mut raw = Raw::new(&server);
    assert_eq!(raw.initialize().await.status, 200);
    assert_eq!(raw.bash(1, "export KEPT=1").await.tool_text(), "");

    // The command says it runs through a FIFO.
    let mut started = common::Fifo::new(&ws, "started");
    let request = raw.request(reqwest::Method::POST).body(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash",
            "arguments": {"command": format!("echo $$ > {}; sleep 300", started.path.display())}}})
        .to_string(),
    );
    let call = tokio::spawn(async move { request.send().await.unwrap().text().await });
    let pid = started.line().await;
    assert!(pid.parse::<u32>().is_ok(), "{pid}");
    // The client goes away: its connection closes.
    call.abort();
    let _ = call.await;

    // The session's next call runs at once, in a reset shell: the call was
    // cancelled, not waited for.
    let next = raw.bash(3, "echo ${KEPT-gone}").await;
    let text = next.tool_text();
    assert!(text.contains("cancelled"), "{text}");
    assert!(text.ends_with("\ngone"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_but_not_during_a_call() {
    let (_dir, ws) = workspace();
    let server = Server::start(&ws, &["--session-idle-secs", "1"]).await;
    let mut raw = Raw::new(&server);
    assert_eq!(raw.initialize().await.status, 200);
    // A call longer than the idle limit is use, not idleness.
    assert_eq!(raw.bash(1, "sleep 3; echo done").await.tool_text(), "done");
    let pid = pids_in(&raw.bash(2, "sleep 300 & echo pid=$!").await.tool_text())[0];
    wait_gone(pid).await;
    let after = raw.bash(3, "touch ran-after-expiry").await;
    assert_eq!(after.status, 404, "{}", after.body);
    assert!(!ws.join("ran-after-expiry").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_limit_refuses_one_more_until_one_ends() {
    let (_dir, ws) = workspace();
    let server = Server::start(&ws, &["--max-sessions", "2"]).await;
    let mut first = Raw::new(&server);
    let mut second = Raw::new(&server);
    let mut third = Raw::new(&server);
    assert_eq!(first.initialize().await.status, 200);
    assert_eq!(second.initialize().await.status, 200);
    let refused = third.initialize().await;
    assert_eq!(refused.status, 503);
    // A JSON-RPC error a client library shows its user.
    let error = refused.message();
    assert_eq!(error["error"]["code"], -32011, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit of 2 sessions"),
        "{}",
        refused.body
    );
    assert_eq!(first.delete().await.status / 100, 2);
    assert_eq!(third.initialize().await.status, 200);
    assert_eq!(third.bash(1, "echo in").await.tool_text(), "in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_token_gets_in_and_refused_requests_run_nothing() {
    let (_dir, ws) = workspace();
    let server = Server::start(&ws, &[]).await;
    let http = http_client(None);

    // The probe needs no token and says nothing.
    let health = http
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "");

    let mut raw = Raw::new(&server);
    assert_eq!(raw.initialize().await.status, 200);
    let marker = ws.join("ran");
    let command = format!("touch {}", marker.display());
    for token in [
        "",
        "wrong-token-0123456789",
        &TOKEN[..TOKEN.len() - 1],
        &format!("{TOKEN}x"),
    ] {
        let mut intruder = Raw::new(&server);
        intruder.token = token.to_owned();
        intruder.session = raw.session.clone();
        let answer = intruder.bash(1, &command).await;
        assert_eq!(answer.status, 401, "{token:?}: {}", answer.body);
        assert_eq!(answer.message()["error"]["code"], -32010, "{}", answer.body);
        assert_eq!(intruder.initialize().await.status, 401);
    }
    // No Authorization header at all, and another scheme.
    let bare = http.post(server.mcp()).body("{}").send().await.unwrap();
    assert_eq!(bare.status(), 401);
    assert_eq!(bare.headers()["www-authenticate"], "Bearer");
    let basic = http
        .post(server.mcp())
        .header("Authorization", format!("Basic {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 401);

    // 10,000 rapid requests without the token: all refused, and the server
    // goes on serving.
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let http = http_client(None);
        let url = server.mcp();
        let session = raw.session.clone().unwrap();
        let command = command.clone();
        tasks.spawn(async move {
            let mut statuses = std::collections::BTreeMap::new();
            for i in 0..625 {
                let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"command": command}}});
                let mut request = http
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream")
                    .header("Mcp-Session-Id", &session)
                    .body(body.to_string());
                if (worker + i) % 2 == 1 {
                    request = request.header("Authorization", "Bearer not-the-token-at-all");
                }
                let status = request.send().await.unwrap().status().as_u16();
                *statuses.entry(status).or_insert(0) += 1;
            }
            statuses
        });
    }
    let mut total = std::collections::BTreeMap::new();
    while let Some(statuses) = tasks.join_next().await {
        for (status, n) in statuses.unwrap() {
            *total.entry(status).or_insert(0) += n;
        }
    }
    assert_eq!(total, [(401, 10_000)].into_iter().collect());
    assert!(!marker.exists(), "a refused request ran");
    assert_eq!(raw.bash(2, "echo served").await.tool_text(), "served");

    // The harness endpoints: behind the token, and 409 without
    // `--copy-on-write`.
    let session = raw.session.clone().unwrap();
    let fork = format!("/sessions/{session}/fork");
    let refused = raw.harness(reqwest::Method::POST, &fork, None, false).await;
    assert_eq!(refused.status, 401);
    let off = raw.harness(reqwest::Method::POST, &fork, None, true).await;
    assert_eq!(off.status, 409, "{}", off.body);
    assert!(
        off.message()["error"]
            .as_str()
            .unwrap()
            .contains("without --copy-on-write"),
        "{}",
        off.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_bodies_and_malformed_requests_are_refused() {
    let (_dir, ws) = workspace();
    let server = Server::start(
        &ws,
        &[
            "--allow-origin",
            "https://ide.example:*",
            "--max-request-bytes",
            "4096",
        ],
    )
    .await;
    let mut raw = Raw::new(&server);
    assert_eq!(raw.initialize().await.status, 200);
    let marker = ws.join("ran");
    let command = format!("touch {}", marker.display());
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": command}}});

    // A browser page of another origin (DNS rebinding): 403.
    let answer = raw
        .send(
            raw.request(reqwest::Method::POST)
                .header("Origin", "http://evil.example")
                .body(call.to_string()),
        )
        .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert!(!marker.exists());
    // The allowed one passes.
    let answer = raw
        .send(
            raw.request(reqwest::Method::POST)
                .header("Origin", "https://ide.example:8443")
                .body(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string()),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    // A body past the bound: 413, nothing runs.
    let big = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": format!("{command} # {}", "x".repeat(8192))}}});
    let answer = raw.post(big).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(!marker.exists());

    // Malformed JSON: 400 with JSON-RPC's parse error; JSON that is not a
    // JSON-RPC message: 400 with its invalid request (the MCP transport's
    // rule: 400, with a JSON-RPC error without an id; the answers of stdio).
    // Another media type: 415.
    for (body, code) in [
        ("{\"jsonrpc\": \"2.0\", \"id\": 4, \"method\"", -32700),
        ("{\"a\": 1}", -32600),
    ] {
        let answer = raw
            .send(raw.request(reqwest::Method::POST).body(body))
            .await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        assert_eq!(answer.content_type.as_deref(), Some("application/json"));
        let error = answer.message();
        assert_eq!(error["id"], Value::Null, "{error}");
        assert_eq!(error["error"]["code"], code, "{error}");
    }
    let answer = raw
        .send(
            raw.http
                .post(&raw.url)
                .header("Authorization", format!("Bearer {TOKEN}"))
                .header("Content-Type", "text/plain")
                .header("Accept", "application/json, text/event-stream")
                .header("Mcp-Session-Id", raw.session.as_deref().unwrap())
                .body(call.to_string()),
        )
        .await;
    assert_eq!(answer.status, 415, "{}", answer.body);
    assert!(!marker.exists());
    let mut stranger = Raw::new(&server);
    stranger.session = Some("00000000-0000-0000-0000-000000000000".to_owned());
    let answer = stranger.bash(5, &command).await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    assert!(!marker.exists());
    let fine = raw.bash(6, "echo fine").await;
    assert_eq!(fine.tool_text(), "fine");
    // No event carries an id (a dropped stream is not resumed: its call is
    // cancelled).
    assert!(
        fine.body.lines().all(|l| !l.starts_with("id:")),
        "{}",
        fine.body
    );
}

/// A test CA in `dir` (`ca.pem`) and a certificate it signed for
/// `localhost` (`cert.pem`, `key.pem`); the CA's PEM.
fn test_pki(dir: &Path) -> String {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    };
    // Names of their own: with rcgen's one default name for both, OpenSSL
    // (the Python client's) takes the leaf for a self-signed certificate.
    let name = |cn: &str| {
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, cn);
        name
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = name("dsh-rs test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.distinguished_name = name("localhost");
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    ca.pem()
}

/// A server serving HTTPS with the certificate of [`test_pki`] in `pki`.
async fn start_tls(ws: &Path, pki: &Path, extra: &[&str]) -> Server {
    let (cert, key) = (pki.join("cert.pem"), pki.join("key.pem"));
    let mut args = vec![
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Server::start_as(ws, &args, "https://localhost").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_test_ca() {
    let (_dir, ws) = workspace();
    let pki = tempfile::tempdir().unwrap();
    let ca_pem = test_pki(pki.path());
    let server = start_tls(&ws, pki.path(), &[]).await;
    let trusting = http_client(Some(&ca_pem));
    let health = trusting
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // A client that does not trust the test CA cannot connect.
    assert!(
        http_client(None)
            .get(format!("{}/healthz", server.base))
            .send()
            .await
            .is_err()
    );
    // Plain HTTP to the HTTPS port gets nothing served.
    let plain = http_client(None)
        .get(format!(
            "{}/healthz",
            server.base.replace("https://", "http://")
        ))
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);

    let client = sdk_client(&server.mcp(), TOKEN, Some(&ca_pem)).await;
    assert_eq!(bash(&client, "echo over tls").await, "over tls");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn listen_refuses_to_start_without_a_usable_token() {
    let (_dir, ws) = workspace();
    let run = |env: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-mcp"));
        command
            .args(["--listen", "127.0.0.1:0", "--workspace"])
            .arg(&ws)
            .env_remove("DSH_TOKEN_FILE");
        match env {
            Some(token) => command.env("DSH_TOKEN", token),
            None => command.env_remove("DSH_TOKEN"),
        };
        command.stdin(Stdio::null()).output().unwrap()
    };
    let out = run(None);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "dsh-mcp: --listen needs a bearer token: --token-file FILE or DSH_TOKEN (the server never runs open)\n"
    );
    let out = run(Some("short"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least 16"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The placeholder of docs/kubernetes.md's Secret, copied as it is.
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/kubernetes.md"),
    )
    .unwrap();
    let placeholder = doc
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: \""))
        .and_then(|rest| rest.split('"').next())
        .expect("docs/kubernetes.md's Secret has a token");
    let out = run(Some(placeholder));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a placeholder"),
        "{placeholder}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Python MCP SDK's Streamable HTTP client (`tests/python/http_client.py`),
/// the token passed with its public API: both tools, a session's state kept
/// and another's apart, a call it gave up on cancelled, DELETE on leaving
/// taken for success and 404 after (a second DELETE too), a wrong token an
/// error of its own with the server's sentence, `/healthz`, 403 for a page's
/// `Origin`, 413 past the body bound, a call longer than the client's read
/// timeout kept alive by the server's keepalive (and dropped by a third
/// server without it); then a second server over HTTPS with a test CA,
/// holding one session at most (503 for another, the SDK's error with the
/// sentence) and ending it when idle (404); then a fourth server with
/// `--copy-on-write`, whose harness endpoints (changes, snapshot, fork,
/// restore, reset, snapshot deletion) are used on the session the SDK's
/// client holds open, in between its calls: the client goes on without a
/// new `initialize` and sees each operation; the base is unchanged.
/// The interpreter is `DSH_TEST_MCP_PYTHON` (a venv with `pip install mcp`;
/// `.ci/run` makes one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the Python mcp SDK (DSH_TEST_MCP_PYTHON: a python with `mcp` installed)"]
async fn python_sdk_client() {
    let python = std::env::var("DSH_TEST_MCP_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let (_dir, ws) = workspace();
    let server = Server::start(&ws, &["--sse-keepalive-secs", "1"]).await;
    let silent = Server::start(&ws, &["--sse-keepalive-secs", "0"]).await;
    let pki = tempfile::tempdir().unwrap();
    test_pki(pki.path());
    let limited = start_tls(
        &ws,
        pki.path(),
        &["--max-sessions", "1", "--session-idle-secs", "2"],
    )
    .await;
    let (_cow_dir, cow_ws) = workspace();
    std::fs::write(cow_ws.join("base.txt"), "base\n").unwrap();
    let cow_before = tree(&cow_ws);
    // Its layers' default directory under a temporary directory of the
    // test's: the server is killed at the end, which leaves it behind.
    let cow_tmp = tempfile::tempdir().unwrap();
    let cow = Server::start_env(&cow_ws, &["--copy-on-write"], &[("TMPDIR", cow_tmp.path())]).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/http_client.py");
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        Command::new(&python)
            .arg(&script)
            .arg(server.mcp())
            .arg(TOKEN)
            .arg(&ws)
            .arg(limited.mcp())
            .arg(pki.path().join("ca.pem"))
            .arg(silent.mcp())
            .arg(cow.mcp())
            .arg(&cow_ws)
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the Python client finished")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{python}: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("all checks passed"), "{stdout}\n{stderr}");
    assert_eq!(tree(&cow_ws), cow_before, "the copy-on-write base changed");
}

/// A file's content (empty for a directory), mode and mtime (seconds,
/// nanoseconds).
type Entry = (Vec<u8>, u32, (i64, i64));

/// Every file under `dir` (relative path: content, mode and mtime), and
/// every directory (mode and mtime): what "unchanged" compares.
fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Entry> {
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                todo.push(path.clone());
                Vec::new()
            };
            let rel = path.strip_prefix(dir).unwrap().to_owned();
            out.insert(
                rel,
                (content, meta.mode(), (meta.mtime(), meta.mtime_nsec())),
            );
        }
    }
    out
}

/// `--copy-on-write` over HTTP, one server for all of it: two sessions on
/// one base each see their own view (the shell's writes, deletions and the
/// editor's files), the base unchanged; the harness endpoints: changes as
/// JSON and as a diff that `git apply` takes in a copy of the base; a fork
/// whose id is usable at once, with the source's files, directory and
/// variables, diverging after; snapshot, restore (into its own session and
/// another), delete (404 after); reset; 401 without the token, 404 for an
/// unknown session or snapshot, 405 for another method. At SIGTERM the
/// server ends and its layers directory (under `TMPDIR`) is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_on_write_sessions_and_the_harness_endpoints() {
    copy_on_write_harness("danger-full-access").await;
}

/// [`copy_on_write_sessions_and_the_harness_endpoints`] in workspace-write:
/// the sessions' shells confined over their views (nothing written
/// outside the workspace), the fork's shell state captured from a
/// confined shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_on_write_sessions_in_workspace_write() {
    copy_on_write_harness("workspace-write").await;
}

async fn copy_on_write_harness(mode: &str) {
    use reqwest::Method;
    let (_dir, ws) = workspace();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.join("del.txt"), "doomed\n").unwrap();
    std::fs::write(ws.join("sub/b.txt"), "b\n").unwrap();
    let before = tree(&ws);
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start_env(
        &ws,
        &["--copy-on-write", "--sandbox", mode],
        &[("TMPDIR", tmp.path())],
    )
    .await;
    let mut a = Raw::new(&server);
    let mut b = Raw::new(&server);
    assert_eq!(a.initialize().await.status, 200);
    assert_eq!(b.initialize().await.status, 200);
    let a_id = a.session.clone().unwrap();
    let b_id = b.session.clone().unwrap();

    // A works; B sees the base.
    let work = a
        .bash(
            1,
            "echo hi > a.txt && rm del.txt && mkdir new && echo x > new/f && cd sub && export V=forkme && X=plain && echo done",
        )
        .await;
    assert_eq!(work.tool_text(), "done");
    let made = a
        .editor(
            2,
            json!({"command": "create", "path": ws.join("ed.txt"), "file_text": "by the editor\n"}),
        )
        .await;
    assert_eq!(made.message()["result"]["isError"], false, "{}", made.body);
    assert_eq!(
        a.bash(3, "cat ../a.txt ../ed.txt; ls -1 ..")
            .await
            .tool_text(),
        "hi\nby the editor\na.txt\ned.txt\nnew\nsub"
    );
    assert_eq!(
        b.bash(1, "cat a.txt; ls -1").await.tool_text(),
        "one\na.txt\ndel.txt\nsub"
    );
    if mode == "workspace-write" {
        // The sandbox's walls over the view.
        assert_eq!(
            b.bash(9, "echo x > /etc/dsh-cow-outside 2>&1 || echo refused")
                .await
                .tool_text(),
            "bash: /etc/dsh-cow-outside: Read-only file system\nrefused"
        );
    }
    assert_eq!(tree(&ws), before, "the base changed");

    // Changes, as JSON and as a diff.
    let changes = a
        .harness(
            Method::GET,
            &format!("/sessions/{a_id}/changes"),
            None,
            true,
        )
        .await;
    assert_eq!(changes.status, 200, "{}", changes.body);
    assert_eq!(changes.content_type.as_deref(), Some("application/json"));
    let listed: Vec<(String, String)> =
        serde_json::from_str::<Value>(&changes.body).unwrap()["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["path"].as_str().unwrap().to_owned(),
                    c["kind"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
    let at = |p: &str| ws.join(p).display().to_string();
    let expected = [
        (at("a.txt"), "modified"),
        (at("del.txt"), "deleted"),
        (at("ed.txt"), "added"),
        (at("new"), "added"),
        (at("new/f"), "added"),
    ]
    .map(|(p, k)| (p, k.to_owned()));
    assert_eq!(listed, expected);
    let diff = a
        .harness(
            Method::GET,
            &format!("/sessions/{a_id}/changes?format=diff"),
            None,
            true,
        )
        .await;
    assert_eq!(diff.status, 200, "{}", diff.body);
    assert!(
        diff.content_type
            .as_deref()
            .unwrap()
            .starts_with("text/x-diff"),
        "{:?}",
        diff.content_type
    );
    let copy = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", ws.display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    let mut apply = std::process::Command::new("git")
        .arg("apply")
        .current_dir(copy.path())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut apply.stdin.take().unwrap(), diff.body.as_bytes()).unwrap();
    assert!(apply.wait().unwrap().success(), "{}", diff.body);
    assert_eq!(
        std::fs::read_to_string(copy.path().join("a.txt")).unwrap(),
        "hi\n"
    );
    assert_eq!(
        std::fs::read_to_string(copy.path().join("ed.txt")).unwrap(),
        "by the editor\n"
    );
    assert_eq!(
        std::fs::read_to_string(copy.path().join("new/f")).unwrap(),
        "x\n"
    );
    assert!(!copy.path().join("del.txt").exists());

    // A fork: usable at once, the source's files and shell state, then apart.
    let forked = a
        .harness(Method::POST, &format!("/sessions/{a_id}/fork"), None, true)
        .await;
    assert_eq!(forked.status, 200, "{}", forked.body);
    let c_id = forked.message()["session"].as_str().unwrap().to_owned();
    assert_ne!(c_id, a_id);
    let c = a.with_session(&c_id);
    assert_eq!(
        c.bash(1, "pwd; echo $V $X; cat ../a.txt ../ed.txt")
            .await
            .tool_text(),
        format!("{}/sub\nforkme plain\nhi\nby the editor", ws.display())
    );
    assert_eq!(
        c.bash(2, "echo fork > ../a.txt && echo ok")
            .await
            .tool_text(),
        "ok"
    );
    assert_eq!(a.bash(4, "cat ../a.txt").await.tool_text(), "hi");
    assert_eq!(c.bash(3, "cat ../a.txt").await.tool_text(), "fork");

    // Snapshot, change, restore into A and into B; delete the snapshot.
    let snap = a
        .harness(
            Method::POST,
            &format!("/sessions/{a_id}/snapshot"),
            None,
            true,
        )
        .await;
    assert_eq!(snap.status, 200, "{}", snap.body);
    let sid = snap.message()["snapshot"].as_str().unwrap().to_owned();
    assert_eq!(
        a.bash(5, "echo later > ../a.txt && cd / && echo ok")
            .await
            .tool_text(),
        "ok"
    );
    for (raw, id, n) in [(&a, &a_id, 6), (&b, &b_id, 2)] {
        let restored = raw
            .harness(
                Method::POST,
                &format!("/sessions/{id}/restore"),
                Some(json!({"snapshot": sid})),
                true,
            )
            .await;
        assert_eq!(restored.status, 200, "{}", restored.body);
        assert_eq!(restored.body, "{}");
        assert_eq!(
            raw.bash(n, "pwd; echo $V; cat ../a.txt").await.tool_text(),
            format!("{}/sub\nforkme\nhi", ws.display())
        );
    }
    let bad_body = a
        .harness(
            Method::POST,
            &format!("/sessions/{a_id}/restore"),
            Some(json!({"snap": sid})),
            true,
        )
        .await;
    assert_eq!(bad_body.status, 400, "{}", bad_body.body);
    let deleted = a
        .harness(Method::DELETE, &format!("/snapshots/{sid}"), None, true)
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    for (method, path, body) in [
        (Method::DELETE, format!("/snapshots/{sid}"), None),
        (
            Method::POST,
            format!("/sessions/{a_id}/restore"),
            Some(json!({"snapshot": sid})),
        ),
        (Method::DELETE, "/snapshots/not-an-id".to_owned(), None),
        (
            Method::GET,
            "/sessions/no-such-session/changes".to_owned(),
            None,
        ),
        (
            Method::POST,
            "/sessions/no-such-session/fork".to_owned(),
            None,
        ),
    ] {
        let answer = a.harness(method, &path, body, true).await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
        assert!(answer.message()["error"].is_string(), "{}", answer.body);
    }
    let wrong = a
        .harness(Method::GET, &format!("/sessions/{a_id}/fork"), None, true)
        .await;
    assert_eq!(wrong.status, 405, "{}", wrong.body);
    let format = a
        .harness(
            Method::GET,
            &format!("/sessions/{a_id}/changes?format=xml"),
            None,
            true,
        )
        .await;
    assert_eq!(format.status, 400, "{}", format.body);
    for path in [
        format!("/sessions/{a_id}/changes"),
        format!("/sessions/{a_id}/fork"),
        format!("/snapshots/{sid}"),
    ] {
        let refused = a.harness(Method::POST, &path, None, false).await;
        assert_eq!(refused.status, 401, "{path}");
    }

    // Reset: the base again, a fresh shell.
    let reset = c
        .harness(Method::POST, &format!("/sessions/{c_id}/reset"), None, true)
        .await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(
        c.bash(4, "pwd; echo ${V:-unset}; cat a.txt")
            .await
            .tool_text(),
        format!("{}\nunset\none", ws.display())
    );
    let none = c
        .harness(
            Method::GET,
            &format!("/sessions/{c_id}/changes"),
            None,
            true,
        )
        .await;
    assert_eq!(none.body, r#"{"changes":[]}"#);
    // A session's end ends its harness endpoints too.
    assert_eq!(c.delete().await.status / 100, 2);
    let gone = c
        .harness(
            Method::GET,
            &format!("/sessions/{c_id}/changes"),
            None,
            true,
        )
        .await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert_eq!(tree(&ws), before, "the base changed");

    // SIGTERM: the server ends, its layers and snapshots with it.
    let made: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("dsh-cow-"))
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let pid = server._child.id().unwrap() as i32;
    // SAFETY: a signal to the server this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(BOUND, server._child.wait())
        .await
        .expect("the server ended")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The resident memory of `pid` and its descendants, in KiB (each
/// process's whole RSS, shared pages counted in each).
fn tree_rss_kib(pid: u32) -> u64 {
    tree_kib(pid, "status", "VmRSS:")
}

/// The proportional set size of `pid` and its descendants, in KiB: each
/// shared page divided among its sharers (what a process forked from the
/// server, sharing its pages, really adds).
fn tree_pss_kib(pid: u32) -> u64 {
    tree_kib(pid, "smaps_rollup", "Pss:")
}

/// The sum of the `key` line of `/proc/PID/file` over `pid` and its
/// descendants, in KiB.
fn tree_kib(pid: u32, file: &str, key: &str) -> u64 {
    let mut children: std::collections::HashMap<u32, Vec<u32>> = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            let ppid = stat
                .rsplit(')')
                .next()
                .unwrap()
                .split_whitespace()
                .nth(1)
                .unwrap();
            children.entry(ppid.parse().unwrap()).or_default().push(p);
        }
    }
    let mut total = 0;
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{p}/{file}")) {
            total += status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map_or(0, |v| {
                    v.trim().trim_end_matches(" kB").parse::<u64>().unwrap()
                });
        }
        todo.extend(children.get(&p).into_iter().flatten());
    }
    total
}

fn p99(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[(times.len() * 99 / 100).min(times.len() - 1)]
}

/// The resident memory of process `pid` alone, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .map_or(0, |v| v.trim().trim_end_matches(" kB").parse().unwrap())
}

/// What one HTTP load measured.
struct Load {
    calls_per_s: f64,
    p99: Duration,
    /// The growth of the server's own RSS per idle session, in KiB.
    server_kib: u64,
    /// The growth of the RSS of the server and its descendants (the
    /// shells) per idle session, in KiB.
    tree_kib: u64,
    /// The same in proportional set size.
    tree_pss_kib: u64,
}

/// `sessions` sessions on one server on `ws` started with `extra`, 5
/// `bash` calls each, `at_once` clients at a time; prints the figures
/// (`label` first) and checks every answer and that an idle session holds
/// at most 16 MiB (its tree's proportional set size: a helper process
/// forked from the server shares most of its pages with it).
async fn http_load(
    label: &str,
    ws: &Path,
    extra: &[&str],
    sessions: usize,
    at_once: usize,
) -> Load {
    const CALLS: usize = 5;
    let max = sessions.to_string();
    let mut flags = vec!["--max-sessions", &max];
    flags.extend(extra);
    let server = Server::start(ws, &flags).await;
    let server_pid = server._child.id().unwrap();
    let before = tree_rss_kib(server_pid);
    let before_pss = tree_pss_kib(server_pid);
    let before_server = rss_kib(server_pid);

    // Open every session, then 5 calls in each: `at_once` clients, each
    // made before the clock starts (making one loads the system's
    // certificates: tens of milliseconds, which would bound the rate).
    let clients: Vec<_> = (0..at_once).map(|_| http_client(None)).collect();
    let started = Instant::now();
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(at_once));
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..sessions {
        let semaphore = semaphore.clone();
        let mut raw = Raw::with_client(&server, clients[s % at_once].clone());
        tasks.spawn(async move {
            let _permit = semaphore.acquire_owned().await.unwrap();
            let t = Instant::now();
            assert_eq!(raw.initialize().await.status, 200);
            let opened = t.elapsed();
            let mut times = Vec::new();
            for c in 0..CALLS {
                let t = Instant::now();
                let answer = raw.bash(c as u64 + 1, &format!("echo {s}.{c}")).await;
                times.push(t.elapsed());
                assert_eq!(answer.tool_text(), format!("{s}.{c}"));
            }
            (raw, opened, times)
        });
    }
    let mut times = Vec::new();
    let mut first = Vec::new();
    let mut opening = Vec::new();
    let mut raws = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (raw, opened, t) = done.unwrap();
        opening.push(opened);
        first.push(t[0]);
        times.extend(t);
        raws.push(raw);
    }
    let elapsed = started.elapsed();
    let idle = tree_rss_kib(server_pid);
    let idle_pss = tree_pss_kib(server_pid);
    let idle_server = rss_kib(server_pid);
    let load = Load {
        calls_per_s: (sessions * CALLS) as f64 / elapsed.as_secs_f64(),
        p99: p99(times),
        server_kib: idle_server.saturating_sub(before_server) / sessions as u64,
        tree_kib: idle.saturating_sub(before) / sessions as u64,
        tree_pss_kib: idle_pss.saturating_sub(before_pss) / sessions as u64,
    };
    eprintln!(
        "{label}: {sessions} sessions x {CALLS} calls in {elapsed:?}: {:.0} calls/s, p99 {:?}; RSS {} MiB before, {} MiB with {sessions} idle sessions: {} KiB per session ({} KiB proportional, {} KiB of the server's own RSS)",
        load.calls_per_s,
        load.p99,
        before / 1024,
        idle / 1024,
        load.tree_kib,
        load.tree_pss_kib,
        load.server_kib,
    );
    eprintln!(
        "{label}: opening a session (initialize, initialized) p99 {:?}; a session's first call (its shell started) p99 {:?}",
        p99(opening),
        p99(first)
    );
    assert!(
        load.tree_pss_kib <= 16 << 10,
        "an idle session holds {} KiB",
        load.tree_pss_kib
    );
    // SIGTERM ends every session at once (and removes a copy-on-write
    // server's layers), faster than a DELETE each.
    drop(raws);
    let mut server = server;
    let pid = server._child.id().unwrap() as i32;
    // SAFETY: a signal to the server this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(600), server._child.wait())
        .await
        .expect("the server ended")
        .unwrap();
    assert!(status.success(), "{status:?}");
    load
}

/// Scale: `DSH_SCALE_SESSIONS` (default 1000) sessions on one server, 5
/// `bash` calls each, 50 clients at a time (50 HTTP clients, made before
/// the clock starts: one per session bounded the rate by the clients'
/// own start, not the server); the same with
/// `--copy-on-write` (each session its own view of the workspace); then
/// the same load over stdio with one process per session. Prints calls/s,
/// p99 and the RSS of an idle session (the copy-on-write figures beside
/// the plain ones); asserts that every call was answered right, that an
/// idle session holds at most 16 MiB (its shell's tree and the server's
/// share). (Its times are figures to read, never asserted: speed is the
/// benches'.) `DSH_TEST_MCP_BINARY` names the binary to measure (a
/// release build: `cargo build --release -p dsh-mcp`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement (minutes, a thousand shells): run it by name"]
async fn scale_sessions_over_http_and_stdio() {
    let sessions: usize = std::env::var("DSH_SCALE_SESSIONS").map_or(1000, |n| n.parse().unwrap());
    const CALLS: usize = 5;
    const AT_ONCE: usize = 50;
    let (_dir, ws) = workspace();
    let plain = http_load("HTTP", &ws, &[], sessions, AT_ONCE).await;
    let cow = http_load(
        "HTTP copy-on-write",
        &ws,
        &["--copy-on-write"],
        sessions,
        AT_ONCE,
    )
    .await;
    eprintln!(
        "HTTP copy-on-write against plain: {:.2}x the calls/s, p99 {:?} against {:?}, {} against {} KiB of the server's RSS per idle session",
        cow.calls_per_s / plain.calls_per_s,
        cow.p99,
        plain.p99,
        cow.server_kib,
        plain.server_kib
    );
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(AT_ONCE));

    // Over stdio: one process per session, the same calls.
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..sessions {
        let semaphore = semaphore.clone();
        let ws = ws.clone();
        tasks.spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _permit = semaphore.acquire_owned().await.unwrap();
            let mut child = Command::new(mcp_binary())
                .arg("--workspace")
                .arg(&ws)
                .env_remove("DSH_HOME")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            let mut stdin = child.stdin.take().unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let mut send = async |message: Value| {
                stdin
                    .write_all(format!("{message}\n").as_bytes())
                    .await
                    .unwrap();
            };
            send(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
            )
            .await;
            lines.next_line().await.unwrap().unwrap();
            send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
            let mut times = Vec::new();
            for c in 0..CALLS {
                let t = Instant::now();
                send(
                    json!({"jsonrpc": "2.0", "id": c + 1, "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"command": format!("echo {s}.{c}")}}}),
                )
                .await;
                let line = lines.next_line().await.unwrap().unwrap();
                times.push(t.elapsed());
                let message: Value = serde_json::from_str(&line).unwrap();
                assert_eq!(message["result"]["content"][0]["text"], format!("{s}.{c}"));
            }
            drop(stdin);
            let _ = child.wait().await;
            times
        });
    }
    let mut times = Vec::new();
    while let Some(done) = tasks.join_next().await {
        times.extend(done.unwrap());
    }
    let stdio_elapsed = started.elapsed();
    let stdio_p99 = p99(times);
    eprintln!(
        "stdio: {sessions} processes x {CALLS} calls in {stdio_elapsed:?}: {:.0} calls/s, p99 {stdio_p99:?}",
        (sessions * CALLS) as f64 / stdio_elapsed.as_secs_f64(),
    );
}

/// The static binary (`cargo build --release --target
/// x86_64-unknown-linux-musl -p dsh-mcp`, named by `DSH_TEST_STATIC_MCP`;
/// `.ci/run` builds it) serving from inside containers a real `dockerd`
/// runs, reached from outside through a port published on loopback: in the
/// `dsh-test` image (BusyBox and a static bash, `.ci/engines`), and mounted
/// read-only into a second image that holds nothing of ours (glibc's bash,
/// dash and coreutils), the way harnesses inject a runtime into task images.
mod docker {
    use super::*;

    const IGNORED: &str = "needs a Docker daemon, the dsh-test image and DSH_TEST_STATIC_MCP";

    /// The static `dsh-mcp`, checked to be static: no interpreter and no
    /// shared library asked for (readelf's program headers and dynamic
    /// section).
    fn static_binary() -> PathBuf {
        let path = std::env::var_os("DSH_TEST_STATIC_MCP").map(PathBuf::from).unwrap_or_else(|| {
            panic!("{IGNORED}: DSH_TEST_STATIC_MCP must name the binary of `cargo build --release --target x86_64-unknown-linux-musl -p dsh-mcp`")
        });
        let headers = cli(
            "readelf",
            &["--program-headers", "--dynamic", path.to_str().unwrap()],
        );
        assert!(
            !headers.contains("INTERP"),
            "{} asks for an interpreter:\n{headers}",
            path.display()
        );
        assert!(
            !headers.contains("(NEEDED)"),
            "{} needs shared libraries:\n{headers}",
            path.display()
        );
        path
    }

    /// Runs `program` with `args`; its standard output, or a panic with
    /// everything it said.
    fn cli(program: &str, args: &[&str]) -> String {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{program} {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// What a test made in Docker, removed whatever happens.
    #[derive(Default)]
    struct Made {
        containers: Vec<String>,
        images: Vec<String>,
    }

    impl Drop for Made {
        fn drop(&mut self) {
            for id in &self.containers {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", id])
                    .output();
            }
            for image in &self.images {
                let _ = std::process::Command::new("docker")
                    .args(["rmi", "-f", image])
                    .output();
            }
        }
    }

    /// An image of what Debian's bash, dash and coreutils packages put in
    /// `/usr/bin`, with the libraries they load (as `ldd` lists them), `sh`
    /// being dash: a glibc system with nothing of this project in it.
    fn glibc_image(name: &str) {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for dir in [
            "usr/bin",
            "usr/lib",
            "usr/lib64",
            "tmp",
            "work",
            "etc",
            "root",
            "proc",
            "dev",
        ] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
        }
        for link in ["bin", "lib", "lib64", "sbin"] {
            std::os::unix::fs::symlink(
                format!("usr/{}", if link == "sbin" { "bin" } else { link }),
                r.join(link),
            )
            .unwrap();
        }
        std::fs::set_permissions(
            r.join("tmp"),
            std::os::unix::fs::PermissionsExt::from_mode(0o1777),
        )
        .unwrap();
        std::fs::write(r.join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
        let mut programs: Vec<String> = cli("dpkg", &["-L", "coreutils"])
            .lines()
            .filter(|p| p.starts_with("/usr/bin/") || p.starts_with("/bin/"))
            .map(str::to_owned)
            .collect();
        programs.extend(["/usr/bin/bash".to_owned(), "/usr/bin/dash".to_owned()]);
        let mut libraries = std::collections::BTreeSet::new();
        for program in &programs {
            let real = std::fs::canonicalize(program).unwrap();
            if !real.is_file() {
                continue;
            }
            let name = Path::new(program).file_name().unwrap();
            std::fs::copy(&real, r.join("usr/bin").join(name)).unwrap();
            let ldd = std::process::Command::new("ldd")
                .arg(&real)
                .output()
                .unwrap();
            for line in String::from_utf8_lossy(&ldd.stdout).lines() {
                if let Some(lib) = line.split_whitespace().find(|w| w.starts_with('/')) {
                    libraries.insert(lib.to_owned());
                }
            }
        }
        for lib in libraries {
            // `/lib` and `/lib64` are links into `/usr` here, as on Debian.
            let inside = r.join(lib.trim_start_matches('/'));
            std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
            std::fs::copy(std::fs::canonicalize(&lib).unwrap(), inside).unwrap();
        }
        std::os::unix::fs::symlink("dash", r.join("usr/bin/sh")).unwrap();
        let mut tar = std::process::Command::new("tar")
            .arg("-C")
            .arg(r)
            .args(["-c", "."])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let imported = std::process::Command::new("docker")
            .args(["import", "-c", "ENV PATH=/usr/bin:/bin", "-", name])
            .stdin(tar.stdout.take().unwrap())
            .output()
            .unwrap();
        assert!(tar.wait().unwrap().success());
        assert!(imported.status.success(), "{imported:?}");
    }

    /// A container of `image` running the server as `binary` (with the
    /// binary mounted at `/opt/dsh/dsh-mcp` when `mount` is given), 256 MiB of
    /// memory and 64 processes at most, its port published on loopback; the
    /// server's base URL once it said where it listens.
    async fn serve(made: &mut Made, image: &str, binary: &str, mount: Option<&Path>) -> String {
        let label = format!("dsh-rs-test-http-{}", std::process::id());
        let mut args = vec![
            "run".to_owned(),
            "-d".to_owned(),
            "--label".to_owned(),
            label,
            "--memory".to_owned(),
            "256m".to_owned(),
            "--memory-swap".to_owned(),
            "256m".to_owned(),
            "--pids-limit".to_owned(),
            "64".to_owned(),
            "-p".to_owned(),
            "127.0.0.1::7777".to_owned(),
            // The token in the environment, as a secret is handed to a
            // container: its shells could read a token file.
            "-e".to_owned(),
            format!("DSH_TOKEN={TOKEN}"),
        ];
        if let Some(mount) = mount {
            args.extend([
                "-v".to_owned(),
                format!("{}:/opt/dsh/dsh-mcp:ro", mount.display()),
            ]);
        }
        args.extend(
            [
                image,
                binary,
                "--listen",
                "0.0.0.0:7777",
                "--workspace",
                "/work",
                "--sandbox",
                "danger-full-access",
            ]
            .map(str::to_owned),
        );
        let id = cli(
            "docker",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        made.containers.push(id.clone());
        // Its log, followed: the line saying where it listens is the event.
        let mut logs = Command::new("docker")
            .args(["logs", "--follow", &id])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(logs.stderr.take().unwrap()).lines();
        tokio::time::timeout(BOUND, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                eprintln!("{line}");
                if line.starts_with("dsh-mcp: listening on ") {
                    return;
                }
            }
            panic!("the container's server ended before listening");
        })
        .await
        .expect("the server in the container started");
        tokio::spawn(async move {
            let _logs = logs;
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{line}");
            }
        });
        let port = cli("docker", &["port", &id, "7777/tcp"]);
        let port = port
            .lines()
            .next()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .to_owned();
        format!("http://127.0.0.1:{port}")
    }

    /// What every container must do, driven from outside: the probe, the
    /// token, both tools with state per session, and the container's limits
    /// holding for the sessions' processes while the server goes on.
    async fn drive(base: &str) {
        let http = http_client(None);
        let health = http.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(health.status(), 200);
        let refused = http
            .post(format!("{base}/mcp"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);

        let a = sdk_client(&format!("{base}/mcp"), TOKEN, None).await;
        let b = sdk_client(&format!("{base}/mcp"), TOKEN, None).await;
        assert_eq!(bash(&a, "cd /tmp && X=kept && echo set").await, "set");
        assert_eq!(bash(&a, "pwd; echo $X").await, "/tmp\nkept");
        assert_eq!(bash(&b, "pwd; echo ${X:-unset}").await, "/work\nunset");
        let created = call(
            &b,
            "str_replace_editor",
            json!({"command": "create", "path": "/work/notes.txt", "file_text": "one\ntwo\n"}),
        )
        .await;
        assert_eq!(created.is_error, Some(false), "{}", text(&created));
        let replaced = call(&b, "str_replace_editor", json!({"command": "str_replace", "path": "/work/notes.txt", "old_str": "two", "new_str": "three"})).await;
        assert_eq!(replaced.is_error, Some(false), "{}", text(&replaced));
        assert_eq!(bash(&a, "cat /work/notes.txt").await, "one\nthree");

        // Memory: a process of a session past the container's 256 MiB is
        // killed by the kernel (137); the session and the server go on.
        let memory = bash(
            &b,
            "bash -c 'x=$(yes | head -c 400000000); echo survived'; echo \"exit $?\"",
        )
        .await;
        eprintln!("memory: {memory}");
        assert!(memory.ends_with("exit 137"), "{memory}");
        assert!(!memory.contains("survived"), "{memory}");
        // Processes: a session starting 100 refused past the container's 64.
        let pids = bash(&b, r#"sh -c 'p=; trap "kill \$p 2>/dev/null; wait" EXIT; i=0; while [ $i -lt 100 ]; do sleep 60 & p="$p $!"; i=$((i+1)); done'; echo done"#).await;
        eprintln!("pids: {pids}");
        assert!(pids.to_lowercase().contains("fork"), "{pids}");
        assert!(pids.ends_with("done"), "{pids}");
        assert_eq!(bash(&a, "echo $X").await, "kept");
        assert_eq!(bash(&b, "echo fine").await, "fine");
        a.cancel().await.unwrap();
        b.cancel().await.unwrap();
    }

    /// The static binary in an image of BusyBox and a static bash, as a
    /// container of `dsh-test` with the binary copied in and committed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon, the dsh-test image and DSH_TEST_STATIC_MCP"]
    async fn the_static_binary_serves_from_a_busybox_image() {
        let binary = static_binary();
        let mut made = Made::default();
        let image = format!("dsh-rs-test-http-busybox-{}", std::process::id());
        let base_container = cli("docker", &["create", "dsh-test", "/bin/true"]);
        made.containers.push(base_container.clone());
        cli(
            "docker",
            &[
                "cp",
                binary.to_str().unwrap(),
                &format!("{base_container}:/bin/dsh-mcp"),
            ],
        );
        cli("docker", &["commit", &base_container, &image]);
        made.images.push(image.clone());
        let base = serve(&mut made, &image, "/bin/dsh-mcp", None).await;
        drive(&base).await;
    }

    /// The static binary mounted read-only into an image that has nothing
    /// of ours and a different C library under its programs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon, the dsh-test image and DSH_TEST_STATIC_MCP"]
    async fn the_static_binary_mounted_into_an_unmodified_image() {
        let binary = static_binary();
        let mut made = Made::default();
        let image = format!("dsh-rs-test-http-glibc-{}", std::process::id());
        glibc_image(&image);
        made.images.push(image.clone());
        let base = serve(&mut made, &image, "/opt/dsh/dsh-mcp", Some(&binary)).await;
        drive(&base).await;
    }
}
