//! The answers the server writes itself, before or instead of rmcp's: plain
//! text, JSON, and the JSON-RPC errors of `/mcp` (a client library shows a
//! JSON-RPC error's code and message to its user; a bare status it does
//! not tell apart from any other failure).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::Body;

/// The code of a request without the server's token (401).
pub const UNAUTHORIZED: i64 = -32010;
/// The code of a new session refused at `--max-sessions` (503).
pub const SESSIONS_FULL: i64 = -32011;

/// `text` with `status` (`text/plain`; no body when empty).
pub(super) fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(text.as_bytes())).boxed());
    *response.status_mut() = status;
    if !text.is_empty() {
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    response
}

/// `value` with `status` (`application/json`).
pub(super) fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    respond(status, "application/json", value.to_string().into())
}

/// A JSON-RPC error of no request (`"id": null`: it was refused before its
/// id was read) with `status`.
pub(super) fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    json_response(
        status,
        &json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}),
    )
}

/// `body` with `status` and `content_type`.
pub(super) fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> Response<Body> {
    let mut response = Response::new(Full::new(body).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
