//! A GRPO-style group on a `dsh-mcp --listen --copy-on-write` server: one
//! session prepared (a command run in it), then forked N times through
//! the harness endpoints (`POST /sessions/{id}/fork`); each fork, usable at
//! once with its own id, runs an attempt; each fork's changes to the
//! workspace are collected as a diff (`GET /sessions/{id}/changes?format=diff`);
//! every session is ended at the end (DELETE), so nothing of the group is
//! left on the server.
//!
//! The forks are driven with plain JSON-RPC over HTTP (`tools/call` with
//! `Mcp-Session-Id`): a fork needs no `initialize`, and the SDK's client
//! always opens a session of its own.
//!
//! Nothing here prints: [`run`] returns the [`Attempt`]s.

use std::time::Duration;

use serde_json::{Value, json};

/// What one fork did.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    /// Its number, `0..n`.
    pub(crate) index: usize,
    /// Its session id.
    pub(crate) session: String,
    /// What its command printed (or the tool's error).
    pub(crate) output: String,
    /// Its changes to the workspace, as a unified diff.
    pub(crate) diff: String,
}

/// One MCP session over plain HTTP.
#[derive(Clone)]
struct Session {
    http: reqwest::Client,
    /// `http://HOST:PORT/mcp`.
    url: String,
    token: String,
    id: String,
    timeout: Duration,
}

impl Session {
    /// The base URL of the harness endpoints (`http://HOST:PORT`).
    fn base(&self) -> &str {
        self.url.trim_end_matches("/mcp")
    }

    /// `method` on the harness endpoint `path`; its body as text.
    async fn harness(&self, method: reqwest::Method, path: &str) -> Result<String, String> {
        let url = format!("{}{path}", self.base());
        let request = self.http.request(method, &url).bearer_auth(&self.token);
        let response = tokio::time::timeout(self.timeout, request.send())
            .await
            .map_err(|_| format!("{url}: no answer within {:?}", self.timeout))?
            .map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        let body = response.text().await.map_err(|e| format!("{url}: {e}"))?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(format!("{url}: {status}: {body}"))
        }
    }

    /// A JSON-RPC message to `/mcp` in this session; the answer's last
    /// message (SSE or JSON), `Null` for a notification.
    async fn post(&self, message: Value) -> Result<Value, String> {
        let mut request = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", PROTOCOL)
            .body(message.to_string());
        if !self.id.is_empty() {
            request = request.header("Mcp-Session-Id", &self.id);
        }
        let response = tokio::time::timeout(self.timeout, request.send())
            .await
            .map_err(|_| format!("no answer within {:?}", self.timeout))?
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = tokio::time::timeout(self.timeout, response.text())
            .await
            .map_err(|_| format!("no whole answer within {:?}", self.timeout))?
            .map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {body}"));
        }
        if let Some(id) = id {
            return last_message(&body).map(|m| json!({"session": id, "message": m}));
        }
        if body.trim().is_empty() {
            return Ok(Value::Null);
        }
        last_message(&body)
    }

    /// A `bash` call: its text, or the tool's error.
    async fn bash(&self, command: &str) -> Result<String, String> {
        let answer = self
            .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "bash", "arguments": {"command": command}}}))
            .await?;
        let result = &answer["result"];
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        if result["isError"] == true {
            return Err(format!("the tool said: {text}"));
        }
        match text {
            "" if result.is_null() => Err(format!("not a tool result: {answer}")),
            text => Ok(text.to_owned()),
        }
    }

    /// Ends the session (its shell and layer go).
    async fn end(&self) {
        let request = self
            .http
            .delete(&self.url)
            .bearer_auth(&self.token)
            .header("Mcp-Session-Id", &self.id);
        let _ = tokio::time::timeout(self.timeout, request.send()).await;
    }
}

/// The protocol version this client speaks.
const PROTOCOL: &str = "2025-06-18";

/// The last JSON-RPC message of an SSE or JSON body.
fn last_message(body: &str) -> Result<Value, String> {
    let data = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|d| !d.is_empty())
        .unwrap_or(body.trim());
    serde_json::from_str(data).map_err(|e| format!("{e}: {body:?}"))
}

/// Prepares a session on `url` with `prepare`, forks it `n` times, runs
/// `attempt` in each fork (with `ATTEMPT` set to its number) at the same
/// time, and collects each fork's diff; ends every session it opened.
pub(crate) async fn run(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    n: usize,
    prepare: &str,
    attempt: &str,
    timeout: Duration,
) -> Result<Vec<Attempt>, String> {
    let mut prepared = Session {
        http: http.clone(),
        url: url.to_owned(),
        token: token.to_owned(),
        id: String::new(),
        timeout,
    };
    let opened = prepared
        .post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "harness-group", "version": "1"}}}),
        )
        .await
        .map_err(|e| format!("initialize: {e}"))?;
    prepared.id = opened["session"]
        .as_str()
        .ok_or_else(|| format!("initialize: no Mcp-Session-Id: {opened}"))?
        .to_owned();
    let result = group(&prepared, n, prepare, attempt).await;
    prepared.end().await;
    result
}

async fn group(
    prepared: &Session,
    n: usize,
    prepare: &str,
    attempt: &str,
) -> Result<Vec<Attempt>, String> {
    prepared
        .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await
        .map_err(|e| format!("initialized: {e}"))?;
    prepared
        .bash(prepare)
        .await
        .map_err(|e| format!("the preparation: {e}"))?;
    let mut forks = Vec::with_capacity(n);
    for _ in 0..n {
        let made = prepared
            .harness(
                reqwest::Method::POST,
                &format!("/sessions/{}/fork", prepared.id),
            )
            .await;
        let made = made.and_then(|body| {
            serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["session"].as_str().map(str::to_owned))
                .ok_or_else(|| format!("a fork's answer without a session: {body}"))
        });
        match made {
            Ok(id) => forks.push(Session {
                id,
                ..prepared.clone()
            }),
            Err(e) => {
                for fork in &forks {
                    fork.end().await;
                }
                return Err(format!("fork: {e}"));
            }
        }
    }
    let mut runs = tokio::task::JoinSet::new();
    for (index, fork) in forks.into_iter().enumerate() {
        let attempt = attempt.to_owned();
        runs.spawn(async move {
            let output = fork
                .bash(&format!("export ATTEMPT={index}; {attempt}"))
                .await
                .unwrap_or_else(|e| e);
            let diff = fork
                .harness(
                    reqwest::Method::GET,
                    &format!("/sessions/{}/changes?format=diff", fork.id),
                )
                .await;
            fork.end().await;
            diff.map(|diff| Attempt {
                index,
                session: fork.id.clone(),
                output,
                diff,
            })
        });
    }
    // Every attempt ends (and ends its session) before an error is told.
    let mut attempts = Vec::with_capacity(n);
    let mut failed = None;
    while let Some(done) = runs.join_next().await {
        match done
            .map_err(|e| format!("an attempt's task: {e}"))
            .and_then(|a| a)
        {
            Ok(attempt) => attempts.push(attempt),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    attempts.sort_by_key(|a| a.index);
    Ok(attempts)
}
