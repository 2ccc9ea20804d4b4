//! The harness endpoints beside `/mcp` (`--copy-on-write`): a session's
//! changes and diff, reset, fork, snapshot and restore, JSON in and out,
//! each in the session's turn (so in order with its calls). The owner of
//! a session is named by its id (`Mcp-Session-Id`).
//!
//! | Request | Answer |
//! |---|---|
//! | `POST /sessions/{id}/fork` | `{"session": NEW}`, a session open at once |
//! | `POST /sessions/{id}/snapshot` | `{"snapshot": SID}` |
//! | `POST /sessions/{id}/restore` with `{"snapshot": SID}` | `{}` |
//! | `POST /sessions/{id}/reset` | `{}` |
//! | `GET /sessions/{id}/changes` | `{"changes": [{"path", "kind", "type"}]}` |
//! | `GET /sessions/{id}/changes?format=diff` | the diff, `text/x-diff` |
//! | `DELETE /snapshots/{SID}` | `{}` |
//!
//! Errors are `{"error": SENTENCE}`: 404 for an unknown session or
//! snapshot (or path), 405 for another method, 409 when the server runs
//! without `--copy-on-write`, 400 for a body that is not the JSON asked
//! for (or an unknown `format`), 403 for a request with an `Origin` (no browser page may call
//! these), 503 when a fork would pass `--max-sessions`, 500 when the
//! operation itself failed.

use dsh_sandbox::SandboxError;
use dsh_sandbox::dsh_workspace::{ChangeKind, EntryKind, SnapshotId, WorkspaceError};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use rmcp::ServiceExt;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, InitializeRequest,
    InitializedNotification, NumberOrString,
};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::SessionId;
use serde_json::{Value, json};

use super::answer::{json_response, respond};
use super::sessions::Sessions;
use super::{Body, GateInner, SessionsError};

/// Whether `path` is one of these endpoints' (or under their prefixes).
pub(super) fn is_route(path: &str) -> bool {
    path.starts_with("/sessions/") || path.starts_with("/snapshots/")
}

/// What a request asks for.
enum Route<'a> {
    /// An operation on the session with this id.
    Session(&'a str, Op),
    /// `DELETE /snapshots/{SID}`.
    DeleteSnapshot(&'a str),
}

/// An operation on a session.
#[derive(Clone, Copy)]
enum Op {
    Fork,
    Snapshot,
    Restore,
    Reset,
    Changes,
}

/// An error answer: its status and sentence.
struct Refusal(StatusCode, String);

impl Refusal {
    fn response(self) -> Response<Body> {
        error(self.0, &self.1)
    }
}

/// The route of `method` on `path`, or why not.
fn route<'a>(method: &Method, path: &'a str) -> Result<Route<'a>, Refusal> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (route, allowed) = match parts.as_slice() {
        ["sessions", id, op] if !id.is_empty() => match *op {
            "fork" => (Route::Session(id, Op::Fork), Method::POST),
            "snapshot" => (Route::Session(id, Op::Snapshot), Method::POST),
            "restore" => (Route::Session(id, Op::Restore), Method::POST),
            "reset" => (Route::Session(id, Op::Reset), Method::POST),
            "changes" => (Route::Session(id, Op::Changes), Method::GET),
            _ => return Err(not_found_path()),
        },
        ["snapshots", sid] if !sid.is_empty() => (Route::DeleteSnapshot(sid), Method::DELETE),
        _ => return Err(not_found_path()),
    };
    if *method != allowed {
        return Err(Refusal(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{path} takes {allowed} only"),
        ));
    }
    Ok(route)
}

fn not_found_path() -> Refusal {
    Refusal(
        StatusCode::NOT_FOUND,
        "no such endpoint: the harness endpoints are POST /sessions/{id}/fork, /snapshot, /restore, /reset, GET /sessions/{id}/changes and DELETE /snapshots/{id} (docs/http.md)".to_owned(),
    )
}

/// Serves one request to these endpoints (its token already checked).
pub(super) async fn handle(gate: &GateInner, request: Request<Incoming>) -> Response<Body> {
    if request.headers().contains_key(hyper::header::ORIGIN) {
        return error(
            StatusCode::FORBIDDEN,
            "the harness endpoints take no request that carries an Origin (a browser page's)",
        );
    }
    let path = request.uri().path().to_owned();
    let route = match route(request.method(), &path) {
        Ok(route) => route,
        Err(refusal) => return refusal.response(),
    };
    let shell = &gate.shell;
    let Some(workspace) = shell.copy_on_write() else {
        return error(
            StatusCode::CONFLICT,
            "this server runs without --copy-on-write: its sessions have no workspace views to fork, snapshot, restore, reset or diff",
        );
    };
    let (id, op) = match route {
        Route::DeleteSnapshot(sid) => {
            return match snapshot_id(sid) {
                Ok(sid) => answer_json(shell.delete_snapshot(&sid).await.map(|()| json!({}))),
                Err(refusal) => refusal.response(),
            };
        }
        Route::Session(id, op) => (id, op),
    };
    let sessions = &gate.sessions;
    if sessions.initialized_with(id).is_none() {
        return error(
            StatusCode::NOT_FOUND,
            &format!("there is no session {id} (never opened, deleted or expired)"),
        );
    }
    sessions.touch(id);
    let answer = match op {
        Op::Fork => return fork(gate, id).await,
        Op::Snapshot => shell
            .snapshot(id)
            .await
            .map(|sid| json!({"snapshot": sid.to_string()})),
        Op::Restore => {
            let sid = match restore_body(gate, request).await {
                Ok(sid) => sid,
                Err(refusal) => return refusal.response(),
            };
            shell.restore(id, &sid).await.map(|()| json!({}))
        }
        Op::Reset => shell.reset_workspace(id).await.map(|()| json!({})),
        Op::Changes => match wants_diff(request.uri().query()) {
            Err(refusal) => return refusal.response(),
            Ok(true) => {
                let diff = shell.diff(id).await;
                settle(gate, id).await;
                return match diff {
                    Ok(diff) => respond(StatusCode::OK, "text/x-diff; charset=utf-8", diff.into()),
                    Err(err) => sandbox_error(&err),
                };
            }
            Ok(false) => changes(shell, workspace.base(), id).await,
        },
    };
    settle(gate, id).await;
    answer_json(answer)
}

/// After an operation on the session `id`: its use counted; or, when the
/// session ended meanwhile, what the operation made for its owner (a
/// layer, a shell) forgotten with it.
async fn settle(gate: &GateInner, id: &str) {
    gate.sessions.settle(id).await;
}

/// The session's changes as the JSON answer.
async fn changes(
    shell: &dsh_sandbox::SandboxedShell,
    base: &std::path::Path,
    id: &str,
) -> Result<Value, SandboxError> {
    shell.changes(id).await.map(|changes| {
        let changes: Vec<Value> = changes
            .iter()
            .map(|c| {
                json!({
                    "path": base.join(&c.path).to_string_lossy(),
                    "kind": match c.kind {
                        ChangeKind::Added => "added",
                        ChangeKind::Modified => "modified",
                        ChangeKind::Deleted => "deleted",
                    },
                    "type": c.entry().map_or("other", |e| match e.kind {
                        EntryKind::File => "file",
                        EntryKind::Dir => "dir",
                        EntryKind::Symlink(_) => "symlink",
                        EntryKind::Other => "other",
                    }),
                })
            })
            .collect();
        json!({ "changes": changes })
    })
}

/// Whether the query asks for `format=diff` (`format=json`, or none, is
/// the JSON list); another format is refused.
fn wants_diff(query: Option<&str>) -> Result<bool, Refusal> {
    let format = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.strip_prefix("format="))
        .next_back();
    match format {
        None | Some("json") => Ok(false),
        Some("diff") => Ok(true),
        Some(other) => Err(Refusal(
            StatusCode::BAD_REQUEST,
            format!("format={other}: the formats are json (the default) and diff"),
        )),
    }
}

/// A snapshot id from a path or a body: an invalid one names no snapshot.
fn snapshot_id(text: &str) -> Result<SnapshotId, Refusal> {
    text.parse::<SnapshotId>()
        .map_err(|e| Refusal(StatusCode::NOT_FOUND, e.to_string()))
}

/// The snapshot a restore's body names (`{"snapshot": SID}`).
async fn restore_body(gate: &GateInner, request: Request<Incoming>) -> Result<SnapshotId, Refusal> {
    let bad = |why: &str| {
        Refusal(
            StatusCode::BAD_REQUEST,
            format!(
                "the body must be a JSON object {{\"snapshot\": ID}} with an id from POST /sessions/{{id}}/snapshot: {why}"
            ),
        )
    };
    let body = Limited::new(request.into_body(), gate.options.max_request_bytes)
        .collect()
        .await
        .map_err(|e| bad(&e.to_string()))?
        .to_bytes();
    let value: Value = serde_json::from_slice(&body).map_err(|e| bad(&e.to_string()))?;
    let sid = value
        .get("snapshot")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("it has no string `snapshot`"))?;
    snapshot_id(sid)
}

/// A new session whose owner is a fork of `from`'s
/// ([`SandboxedShell::fork`]), opened as rmcp opens one for an
/// `initialize` (with what `from`'s client sent), so that its id is
/// usable at once.
async fn fork(gate: &GateInner, from: &str) -> Response<Body> {
    let sessions = &gate.sessions;
    let Some(Some(init)) = sessions.initialized_with(from) else {
        return error(
            StatusCode::CONFLICT,
            &format!("the session {from} is still being opened; fork it after its initialize"),
        );
    };
    let (id, transport) = match sessions.create_session().await {
        Ok(made) => made,
        Err(err @ SessionsError::Full { .. }) => {
            return error(StatusCode::SERVICE_UNAVAILABLE, &err.to_string());
        }
        Err(err) => return error(StatusCode::INTERNAL_SERVER_ERROR, &chain(&err)),
    };
    if let Err(err) = gate.shell.fork(from, &id).await {
        let _ = sessions.close_session(&id).await;
        return sandbox_error(&err);
    }
    let opened = open(gate, &id, transport, (*init).clone()).await;
    sessions.touch(from);
    match opened {
        Ok(()) => {
            tracing::info!(session = %id, from, "session forked");
            let mut response = json_response(StatusCode::OK, &json!({ "session": &*id }));
            if let Ok(value) = HeaderValue::from_str(&id) {
                response.headers_mut().insert("mcp-session-id", value);
            }
            response
        }
        Err(why) => {
            let _ = sessions.close_session(&id).await;
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the forked session could not be opened: {why}"),
            )
        }
    }
}

/// Serves the session `id` over `transport` (until it ends, then closes
/// it, as rmcp does for the sessions it opens) and initializes it with
/// `init`.
async fn open(
    gate: &GateInner,
    id: &SessionId,
    transport: <Sessions as SessionManager>::Transport,
    init: rmcp::model::InitializeRequestParams,
) -> Result<(), String> {
    let service = (gate.factory)();
    let cancel = gate.stop.child_token();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let sessions = gate.sessions.clone();
    let session = id.clone();
    tokio::spawn(async move {
        match service.serve_with_ct(transport, cancel).await {
            Ok(running) => {
                let _ = ready_tx.send(());
                let _ = running.waiting().await;
            }
            Err(err) => {
                tracing::warn!(session = %session, %err, "a forked session's service did not start")
            }
        }
        let _ = sessions.close_session(&session).await;
    });
    let initialize = ClientJsonRpcMessage::request(
        ClientRequest::InitializeRequest(InitializeRequest::new(init)),
        NumberOrString::Number(0),
    );
    let answer = gate
        .sessions
        .initialize_session(id, initialize)
        .await
        .map_err(|e| chain(&e))?;
    if let rmcp::model::JsonRpcMessage::Error(err) = answer {
        return Err(err.error.message.to_string());
    }
    let initialized = ClientJsonRpcMessage::notification(
        ClientNotification::InitializedNotification(InitializedNotification::default()),
    );
    gate.sessions
        .accept_message(id, initialized)
        .await
        .map_err(|e| chain(&e))?;
    ready_rx
        .await
        .map_err(|_| "its MCP service ended during its initialize".to_owned())
}

/// The JSON answer of an operation, or its error's.
fn answer_json(answer: Result<Value, SandboxError>) -> Response<Body> {
    match answer {
        Ok(value) => json_response(StatusCode::OK, &value),
        Err(err) => sandbox_error(&err),
    }
}

/// An operation's error: 404 for a snapshot that is not there, 409 for a
/// server without copy-on-write, 500 for the rest.
fn sandbox_error(err: &SandboxError) -> Response<Body> {
    let status = match err {
        SandboxError::Workspace(
            WorkspaceError::SnapshotNotFound { .. } | WorkspaceError::InvalidSnapshotId { .. },
        ) => StatusCode::NOT_FOUND,
        SandboxError::NoCopyOnWrite => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, &chain(err))
}

/// `error` and its sources, `: `-joined.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    text
}

/// The endpoints' error answer: `{"error": SENTENCE}`.
pub(super) fn error(status: StatusCode, sentence: &str) -> Response<Body> {
    json_response(status, &json!({ "error": sentence }))
}
