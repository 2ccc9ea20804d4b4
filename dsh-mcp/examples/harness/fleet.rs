//! A fleet of MCP sessions spread over several `dsh-mcp --listen` servers,
//! each running a short agent-like script of `bash` and
//! `str_replace_editor` calls, with the official Rust SDK's client (rmcp's
//! `StreamableHttpClientTransport` over reqwest).
//!
//! Every call has a timeout. A session the server no longer knows (404:
//! expired, deleted) or whose connection is lost is replaced by a new
//! session on the same server and the call is tried again, a bounded number
//! of times; the report says so, since the new session's shell starts
//! afresh (its directory, variables and processes are gone). When no new
//! session can be opened the session ends with an error naming the server,
//! the call and why. A call whose connection broke while it ran may have
//! run in part before it is tried again (the server cancels a call whose
//! connection dropped). A call with no answer in time ends its session
//! (closed: its shell ends), without a retry: it would likely hang again.
//!
//! Nothing here prints: [`run`] returns a [`Report`], the caller shows it.
//! The harness example (`main.rs`) and `tests/hosts.rs` share this module.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{ClientInitializeError, RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{DynamicTransportError, StreamableHttpClientTransport};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

/// One MCP session of the SDK's client.
type Session = RunningService<RoleClient, ()>;

/// The calls of each session's script.
pub(crate) const SCRIPT_CALLS: usize = 5;

/// What to run, where, and how patiently.
#[derive(Debug, Clone)]
pub(crate) struct FleetConfig {
    /// The servers' MCP endpoints (`http://HOST:PORT/mcp`); session `i`
    /// goes to server `i % servers.len()`.
    pub(crate) servers: Vec<String>,
    /// The bearer token (without `Bearer `).
    pub(crate) token: String,
    /// How many sessions, all running at the same time.
    pub(crate) sessions: usize,
    /// The longest wait for one call's answer, or for a session to open.
    pub(crate) call_timeout: Duration,
    /// How many new sessions one call may open after its session was lost
    /// (each tried once), before its session ends with an error.
    pub(crate) reconnects: usize,
    /// A pause before each call after the first (an agent thinking).
    pub(crate) think: Duration,
    /// Hold every session before one call until told to go on.
    pub(crate) checkpoint: Option<Checkpoint>,
    /// Counts of what happened so far, for a caller that watches the run.
    pub(crate) progress: Option<Arc<watch::Sender<Progress>>>,
}

/// Every session waits before call `before_call` (0-based) until `open`
/// holds `true`: the whole fleet reaches a known point first (a snapshot,
/// a fault injected at a known moment).
#[derive(Debug, Clone)]
pub(crate) struct Checkpoint {
    pub(crate) before_call: usize,
    pub(crate) open: watch::Receiver<bool>,
}

/// What happened so far in a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Calls answered as the script expected.
    pub(crate) calls_ok: usize,
    /// Calls that failed (no answer, an error, a wrong answer).
    pub(crate) calls_failed: usize,
    /// Sessions waiting at the checkpoint.
    pub(crate) at_checkpoint: usize,
    /// Sessions that ended (their script done, or an error).
    pub(crate) ended: usize,
}

/// What one session did.
#[derive(Debug, Clone)]
pub(crate) struct SessionReport {
    /// Its number, `0..sessions`.
    pub(crate) session: usize,
    /// Its server's MCP endpoint.
    pub(crate) server: String,
    pub(crate) calls_ok: usize,
    pub(crate) calls_failed: usize,
    /// New sessions opened after a lost one (each with a fresh shell).
    pub(crate) new_sessions: usize,
    /// Events worth knowing that did not end the session (a lost session
    /// replaced).
    pub(crate) notes: Vec<String>,
    /// Why the session ended before its script did.
    pub(crate) error: Option<String>,
}

/// One server's share of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServerSummary {
    pub(crate) sessions: usize,
    pub(crate) completed: usize,
    pub(crate) failed: usize,
    pub(crate) calls_ok: usize,
    pub(crate) calls_failed: usize,
    pub(crate) new_sessions: usize,
}

/// What every session did, in session order.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) sessions: Vec<SessionReport>,
}

impl Report {
    /// Per server (in the order given), its sessions' totals.
    pub(crate) fn per_server(&self, servers: &[String]) -> Vec<(String, ServerSummary)> {
        let mut by: BTreeMap<&str, ServerSummary> = BTreeMap::new();
        for s in &self.sessions {
            let sum = by.entry(&s.server).or_default();
            sum.sessions += 1;
            if s.error.is_some() {
                sum.failed += 1;
            } else {
                sum.completed += 1;
            }
            sum.calls_ok += s.calls_ok;
            sum.calls_failed += s.calls_failed;
            sum.new_sessions += s.new_sessions;
        }
        servers
            .iter()
            .map(|url| (url.clone(), by.remove(url.as_str()).unwrap_or_default()))
            .collect()
    }

    /// Whether every session ran its whole script.
    pub(crate) fn all_completed(&self) -> bool {
        self.sessions.iter().all(|s| s.error.is_none())
    }

    /// A few lines: one per server, then the first `errors` session errors
    /// and notes.
    pub(crate) fn summary(&self, servers: &[String], errors: usize) -> String {
        let mut out = String::new();
        for (url, s) in self.per_server(servers) {
            let _ = writeln!(
                out,
                "{url}: {} sessions, {} completed, {} failed; calls {} ok, {} failed; {} new sessions after a lost one",
                s.sessions, s.completed, s.failed, s.calls_ok, s.calls_failed, s.new_sessions
            );
        }
        let failed: Vec<&String> = self
            .sessions
            .iter()
            .filter_map(|s| s.error.as_ref())
            .collect();
        for e in failed.iter().take(errors) {
            let _ = writeln!(out, "error: {e}");
        }
        if failed.len() > errors {
            let _ = writeln!(out, "... and {} more errors", failed.len() - errors);
        }
        let notes: Vec<&String> = self.sessions.iter().flat_map(|s| &s.notes).collect();
        for n in notes.iter().take(errors) {
            let _ = writeln!(out, "note: {n}");
        }
        if notes.len() > errors {
            let _ = writeln!(out, "... and {} more notes", notes.len() - errors);
        }
        out
    }
}

/// Why a fleet could not run at all (each session's own failure is in its
/// [`SessionReport`]).
#[derive(Debug)]
pub(crate) enum FleetError {
    /// No server, no session, or a token the HTTP client cannot send.
    Config(String),
    /// The HTTP client could not be built.
    Client(String),
    /// A session's task panicked or was cancelled.
    Task(String),
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FleetError::Config(e) => write!(f, "bad fleet configuration: {e}"),
            FleetError::Client(e) => write!(f, "the HTTP client: {e}"),
            FleetError::Task(e) => write!(f, "a session's task: {e}"),
        }
    }
}

impl std::error::Error for FleetError {}

/// Runs `config.sessions` sessions at the same time, spread over the
/// servers, each its script; returns when every session ended.
pub(crate) async fn run(config: FleetConfig) -> Result<Report, FleetError> {
    if config.servers.is_empty() {
        return Err(FleetError::Config("no server".to_owned()));
    }
    if config.sessions == 0 {
        return Err(FleetError::Config("no session".to_owned()));
    }
    if config.token.trim().is_empty() || config.token.contains(['\r', '\n']) {
        return Err(FleetError::Config(
            "the token is empty or holds a line break".to_owned(),
        ));
    }
    let http = http_client()?;
    let config = Arc::new(config);
    let run = run_id();
    let mut tasks = tokio::task::JoinSet::new();
    for session in 0..config.sessions {
        let server = config.servers[session % config.servers.len()].clone();
        let config = config.clone();
        let http = http.clone();
        let dir = format!("\"${{TMPDIR:-/tmp}}/dsh-fleet-{run}-{session}\"");
        tasks.spawn(async move {
            let report = drive(&config, &http, session, server, &dir).await;
            if let Some(progress) = &config.progress {
                progress.send_modify(|p| p.ended += 1);
            }
            report
        });
    }
    let mut sessions = Vec::with_capacity(config.sessions);
    while let Some(done) = tasks.join_next().await {
        sessions.push(done.map_err(|e| FleetError::Task(e.to_string()))?);
    }
    sessions.sort_by_key(|s| s.session);
    Ok(Report { sessions })
}

/// This run's mark in the names of the sessions' directories: 64 bits
/// from the standard library's random hash keys, the time and the pid.
fn run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{:016x}", h.finish())
}

/// One reqwest client for all sessions (its connection pool shared).
pub(crate) fn http_client() -> Result<reqwest::Client, FleetError> {
    // reqwest is built with rustls and no crypto provider of its own.
    #[cfg(target_os = "linux")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .build()
        .map_err(|e| FleetError::Client(chain(&e)))
}

/// An error and its causes, `: `-joined: the SDK's wrappers that name
/// only a type, or keep their cause out of `source()`, are looked through,
/// so that the cause (`Connection refused`, `Session expired (HTTP 404)`)
/// shows.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut push = |s: &str| {
        if !text.contains(s) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(s);
        }
    };
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(ServiceError::TransportSend(inner)) = e.downcast_ref::<ServiceError>() {
            next = Some(&*inner.error);
            continue;
        }
        if let Some(inner) = e.downcast_ref::<DynamicTransportError>() {
            next = Some(&*inner.error);
            continue;
        }
        if let Some(ClientInitializeError::TransportError { error, context }) =
            e.downcast_ref::<ClientInitializeError>()
        {
            push(context);
            next = Some(&*error.error);
            continue;
        }
        if let Some(StreamableHttpError::Client(inner)) =
            e.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            next = Some(inner);
            continue;
        }
        push(&e.to_string());
        next = e.source();
    }
    text
}

/// Opens a session on `server` (initialize, then initialized), within
/// `timeout`.
async fn open(
    http: &reqwest::Client,
    server: &str,
    token: &str,
    timeout: Duration,
) -> Result<Session, String> {
    // A 404 must reach us: the SDK would otherwise open a new session
    // silently, and the harness would not know the shell's state is gone.
    let transport = StreamableHttpClientTransport::with_client(
        http.clone(),
        StreamableHttpClientTransportConfig::with_uri(server.to_owned())
            .auth_header(token.to_owned())
            .reinit_on_expired_session(false),
    );
    match tokio::time::timeout(timeout, ().serve(transport)).await {
        Err(_) => Err(format!("no answer to initialize within {timeout:?}")),
        Ok(Err(e)) => Err(chain(&e)),
        Ok(Ok(session)) => Ok(session),
    }
}

/// One call of a script: the tool and its arguments.
struct Call {
    tool: &'static str,
    args: Value,
}

/// Call `step` of session `session`'s script; `made` is the directory its
/// first call made (empty before), `dir` the shell expression naming it
/// (chosen here, so that it can be removed whatever happened to the
/// session: see [`clean_up`]).
fn script(step: usize, session: usize, made: &str, dir: &str) -> Call {
    let mark = format!("s{session}");
    let notes = format!("{made}/notes.txt");
    match step {
        // A directory of its own, a variable: the shell's state.
        0 => bash(format!(
            "mkdir -m 700 {dir} && cd {dir} && export FLEET_MARK={mark} && pwd"
        )),
        1 => editor(json!({"command": "create", "path": notes,
            "file_text": format!("hello from {mark}\n")})),
        // The state of call 0 is still there.
        2 => bash("echo \"$FLEET_MARK $PWD\" && grep -c hello notes.txt".to_owned()),
        3 => editor(json!({"command": "str_replace", "path": notes,
            "old_str": "hello", "new_str": "bye"})),
        _ => bash(
            "cat notes.txt && cd / && rm -r \"$OLDPWD\" && echo \"$FLEET_MARK done\"".to_owned(),
        ),
    }
}

fn bash(command: String) -> Call {
    Call {
        tool: "bash",
        args: json!({ "command": command }),
    }
}

fn editor(args: Value) -> Call {
    Call {
        tool: "str_replace_editor",
        args,
    }
}

/// Whether the answer of call `step` is the one expected (`dir` set by
/// call 0).
fn check(
    step: usize,
    session: usize,
    dir: &mut String,
    result: &CallToolResult,
) -> Result<(), String> {
    let text: String = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        return Err(format!("the tool said: {text}"));
    }
    let mark = format!("s{session}");
    let ok = match step {
        0 => {
            let found = text.trim();
            if found.starts_with('/') && !found.contains('\n') {
                *dir = found.to_owned();
                true
            } else {
                false
            }
        }
        1 | 3 => true,
        2 => text == format!("{mark} {dir}\n1"),
        _ => text == format!("bye from {mark}\n{mark} done"),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("unexpected answer {text:?}"))
    }
}

/// One session's script on `server`, working in the directory `dir` (a
/// shell expression) of the server's, removed at the end whatever
/// happened.
async fn drive(
    config: &FleetConfig,
    http: &reqwest::Client,
    session: usize,
    server: String,
    dir: &str,
) -> SessionReport {
    let mut report = script_on(config, http, session, &server, dir).await;
    // The script's last call removes the directory; a session that did not
    // get there (lost, an error, no answer) left it: a new session removes
    // it (the shell of the old one may be gone or still busy).
    if report.error.is_some()
        && let Err(e) = clean_up(config, http, &server, dir).await
    {
        report.notes.push(format!(
            "{server}: session {session}: {dir} was not removed: {e}"
        ));
    }
    report
}

/// Removes `dir` (a shell expression) on `server` through a new session.
async fn clean_up(
    config: &FleetConfig,
    http: &reqwest::Client,
    server: &str,
    dir: &str,
) -> Result<(), String> {
    let mut client = open(http, server, &config.token, config.call_timeout).await?;
    let call = bash(format!("rm -rf -- {dir}"));
    let params = CallToolRequestParams::new(call.tool).with_arguments(arguments(call.args));
    let answer = tokio::time::timeout(config.call_timeout, client.call_tool(params)).await;
    let _ = client.close_with_timeout(config.call_timeout).await;
    match answer {
        Err(_) => Err(format!("no answer within {:?}", config.call_timeout)),
        Ok(Err(e)) => Err(chain(&e)),
        Ok(Ok(result)) if result.is_error == Some(true) => Err(format!(
            "the tool said: {}",
            result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
                .collect::<String>()
        )),
        Ok(Ok(_)) => Ok(()),
    }
}

/// The script itself (see [`drive`]).
async fn script_on(
    config: &FleetConfig,
    http: &reqwest::Client,
    session: usize,
    server: &str,
    dir: &str,
) -> SessionReport {
    let server = server.to_owned();
    let mut report = SessionReport {
        session,
        server: server.clone(),
        calls_ok: 0,
        calls_failed: 0,
        new_sessions: 0,
        notes: Vec::new(),
        error: None,
    };
    let who = format!("{server}: session {session}");
    let mut client = match open(http, &server, &config.token, config.call_timeout).await {
        Ok(client) => client,
        Err(e) => {
            report.error = Some(format!("{who}: could not open a session: {e}"));
            return report;
        }
    };
    let mut made = String::new();
    let mut state_lost = false;
    for step in 0..SCRIPT_CALLS {
        if let Some(checkpoint) = &config.checkpoint
            && checkpoint.before_call == step
        {
            wait_at(config, checkpoint).await;
        }
        if step > 0 && !config.think.is_zero() {
            tokio::time::sleep(config.think).await;
        }
        let call = script(step, session, &made, dir);
        let what = format!("{who}, call {step} ({})", call.tool);
        let params = CallToolRequestParams::new(call.tool).with_arguments(arguments(call.args));
        let mut opened = 0;
        let outcome = loop {
            let answer =
                tokio::time::timeout(config.call_timeout, client.call_tool(params.clone())).await;
            let lost = match answer {
                Err(_) => {
                    break Err(format!(
                        "{what}: no answer within {:?}; the session is closed",
                        config.call_timeout
                    ));
                }
                Ok(Ok(result)) => {
                    break check(step, session, &mut made, &result).map_err(|e| {
                        let after = if state_lost {
                            " (this shell is a new session's: the lost one's state is gone)"
                        } else {
                            ""
                        };
                        format!("{what}: {e}{after}")
                    });
                }
                // The server answered, with an error: the session is alive.
                Ok(Err(ServiceError::McpError(e))) => {
                    break Err(format!("{what}: the server refused the call: {e}"));
                }
                Ok(Err(e)) => chain(&e),
            };
            // The session is lost (404, a connection lost or refused):
            // a new one on the same server, the call again.
            let mut last = String::new();
            let mut replaced = None;
            while opened < config.reconnects {
                if !last.is_empty() {
                    // A server restarting gets a moment: 0.25 s, 0.5 s, 1 s...
                    let pause = Duration::from_millis(250) * 2u32.saturating_pow(opened as u32 - 1);
                    tokio::time::sleep(pause.min(Duration::from_secs(8))).await;
                }
                opened += 1;
                match open(http, &server, &config.token, config.call_timeout).await {
                    Ok(new) => {
                        replaced = Some(new);
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            match replaced {
                Some(new) => {
                    // The old one's worker ends (and tries its DELETE).
                    drop(std::mem::replace(&mut client, new));
                    report.new_sessions += 1;
                    state_lost = true;
                    report.notes.push(format!(
                        "{what}: the session was lost ({lost}); a new session on {server}: the shell's state is gone"
                    ));
                }
                None if opened == 0 => {
                    break Err(format!(
                        "{what}: the session was lost ({lost}); no new session is allowed"
                    ));
                }
                None if last.is_empty() => {
                    break Err(format!(
                        "{what}: the session was lost ({lost}), and {} new sessions were lost too",
                        config.reconnects
                    ));
                }
                None => {
                    break Err(format!(
                        "{what}: the session was lost ({lost}) and no new session could be opened ({} tries; the last: {last})",
                        config.reconnects
                    ));
                }
            }
        };
        match outcome {
            Ok(()) => {
                report.calls_ok += 1;
                if let Some(progress) = &config.progress {
                    progress.send_modify(|p| p.calls_ok += 1);
                }
            }
            Err(e) => {
                report.calls_failed += 1;
                if let Some(progress) = &config.progress {
                    progress.send_modify(|p| p.calls_failed += 1);
                }
                report.error = Some(e);
                break;
            }
        }
    }
    // Ends the session (DELETE: its shell ends); a dead server does not
    // hold us.
    let _ = client.close_with_timeout(config.call_timeout).await;
    report
}

/// Waits at `checkpoint` until it opens.
async fn wait_at(config: &FleetConfig, checkpoint: &Checkpoint) {
    if let Some(progress) = &config.progress {
        progress.send_modify(|p| p.at_checkpoint += 1);
    }
    let mut open = checkpoint.open.clone();
    // A dropped sender opens it too: nobody is left to open it.
    let _ = open.wait_for(|open| *open).await;
    if let Some(progress) = &config.progress {
        progress.send_modify(|p| p.at_checkpoint -= 1);
    }
}

fn arguments(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
