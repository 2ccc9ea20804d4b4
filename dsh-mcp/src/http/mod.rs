//! MCP over Streamable HTTP (`dsh-mcp --listen`): rmcp's server transport
//! at `/mcp`, behind a bearer token, with one owner of the shell tool per
//! MCP session.
//!
//! What the server answers, before rmcp sees a request:
//!
//! * `GET /healthz`: 200 with an empty body, without a token (for probes);
//! * `/sessions/...` and `/snapshots/...`: the harness endpoints of
//!   `--copy-on-write` (fork, snapshot, restore, reset, changes), behind
//!   the same token (see `docs/http.md`);
//! * any other path: 404;
//! * `/mcp` without `Authorization: Bearer TOKEN`, or with another token:
//!   401 with a JSON-RPC error ([`answer::UNAUTHORIZED`]), and nothing runs;
//! * a `POST` that would open one session past `max_sessions`: 503 with
//!   a JSON-RPC error ([`answer::SESSIONS_FULL`]) giving the reason;
//! * a JSON `POST` body past `max_request_bytes`: 413; one that is not a
//!   message rmcp takes: 400 with the JSON-RPC error stdio would answer
//!   (-32700 for a body that is not JSON, -32600 for JSON that is not a
//!   JSON-RPC message);
//! * `DELETE` of a session that is not open: 404; of an open one: 204 once
//!   rmcp ended it.
//!
//! rmcp then refuses an `Origin` that is not allowed (403), another media
//! type (415) and an unknown or ended session id (404). No SSE event
//! carries an id: a call whose connection dropped is cancelled, so there
//! is nothing to resume.

pub mod answer;
mod auth;
mod rollout;
mod sessions;
#[cfg(feature = "tls")]
mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dsh_editor::EditorConfig;
use dsh_editor::fs::Fs;
use dsh_sandbox::SandboxedShell;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::SessionLog;
use crate::server::{DshServer, EditorTemplate};

pub use auth::{MIN_TOKEN_LEN, Token, TokenError};
pub use sessions::SessionsError;
#[cfg(feature = "tls")]
pub use tls::{TlsError, TlsFiles};

/// The largest request body taken by default (4 MiB): a `str_replace` of
/// a large file fits; a runaway client does not hold the server's memory.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 << 20;

/// The settings of the HTTP server.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The token every `/mcp` request must present.
    pub token: Token,
    /// The `Origin`s a request may carry (`scheme://host[:port]`, `:*` for
    /// any port, `null`); a request with any other is refused (403). A
    /// request without `Origin` (not from a browser) passes.
    pub allowed_origins: Vec<String>,
    /// The largest request body (413 past it).
    pub max_request_bytes: usize,
    /// A session with no request and no call running for this long is
    /// ended; `None`: never.
    pub session_idle: Option<Duration>,
    /// The most sessions open at once.
    pub max_sessions: usize,
    /// How often an answer's SSE stream that has nothing to send carries
    /// a comment, so that a client's read timeout or a proxy's idle
    /// timeout does not drop a long call; `None`: never.
    pub sse_keep_alive: Option<Duration>,
    /// Serve HTTPS with this certificate and key.
    #[cfg(feature = "tls")]
    pub tls: Option<TlsFiles>,
}

impl HttpOptions {
    /// `token`'s server with `dsh-mcp --listen`'s defaults: no browser
    /// origin, [`DEFAULT_MAX_REQUEST_BYTES`], sessions idle for 30 minutes
    /// ended, at most 1,000 sessions, a keep-alive comment every 15 s, no
    /// TLS.
    pub fn new(token: Token) -> Self {
        HttpOptions {
            token,
            allowed_origins: Vec::new(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            session_idle: Some(Duration::from_secs(1800)),
            max_sessions: 1000,
            sse_keep_alive: Some(Duration::from_secs(15)),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// Why the HTTP server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The editor's settings are invalid.
    #[error(transparent)]
    Editor(#[from] dsh_editor::EditorConfigError),
    /// The address cannot be listened on.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate or key cannot be used.
    #[cfg(feature = "tls")]
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// The two tools served over Streamable HTTP, one owner per MCP session.
#[derive(Debug)]
pub struct HttpServer {
    shell: Arc<SandboxedShell>,
    gate: Gate,
}

impl HttpServer {
    /// A server over `shell` (each session its own owner in it) and
    /// editors with `editor` settings, over `fs` for every session (a
    /// container's, a remote host's) or, when `None`, over each session's
    /// own [`SandboxedShell::editor_fs`]. `log` gets every session's calls;
    /// an [`ElicitApprover`](crate::ElicitApprover) in `shell`'s config asks
    /// the client of the call that escalates.
    pub fn new(
        shell: SandboxedShell,
        editor: EditorConfig,
        fs: Option<Arc<dyn Fs>>,
        log: Option<SessionLog>,
        options: HttpOptions,
    ) -> Result<HttpServer, HttpError> {
        let shell = Arc::new(shell);
        let template = EditorTemplate::new(editor, fs)?;
        let log = log.map(Arc::new);
        let sessions = sessions::Sessions::new(options.max_sessions.max(1), Arc::clone(&shell));
        let stop = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_allowed_origins(options.allowed_origins.clone())
            .enforce_origin_validation()
            // A server in a container or a pod is reached by names this
            // side cannot know; the token (which a browser page cannot
            // read) and the Origin rule keep DNS rebinding out.
            .disable_allowed_hosts()
            .with_max_request_body_bytes(options.max_request_bytes)
            .with_sse_retry(None)
            .with_sse_keep_alive(options.sse_keep_alive)
            .with_cancellation_token(stop.child_token());
        let factory: Factory = {
            let shell = Arc::clone(&shell);
            Arc::new(move || {
                DshServer::per_session(Arc::clone(&shell), template.clone(), log.clone())
            })
        };
        let mcp = {
            let factory = Arc::clone(&factory);
            StreamableHttpService::new(move || Ok(factory()), Arc::new(sessions.clone()), config)
        };
        Ok(HttpServer {
            shell: Arc::clone(&shell),
            gate: Gate(Arc::new(GateInner {
                mcp,
                sessions,
                options,
                stop,
                shell,
                factory,
            })),
        })
    }

    /// Whether it serves HTTPS.
    pub fn is_https(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.gate.0.options.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// The shell tool (to close every session's shell on shutdown).
    pub fn shell(&self) -> &SandboxedShell {
        &self.shell
    }

    /// Binds `addr` (`HOST:PORT`; port 0 picks a free one).
    pub async fn bind(addr: &str) -> Result<Listener, HttpError> {
        TcpListener::bind(addr)
            .await
            .map(Listener)
            .map_err(|source| HttpError::Listen {
                addr: addr.to_owned(),
                source,
            })
    }

    /// Serves connections on `listener` until `shutdown` resolves, then
    /// ends every session (and so every session's shell).
    pub async fn serve(
        &self,
        listener: Listener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), HttpError> {
        let Listener(listener) = listener;
        #[cfg(feature = "tls")]
        let tls = match &self.gate.0.options.tls {
            Some(files) => Some(files.acceptor()?),
            None => None,
        };
        let expiry = self.gate.0.options.session_idle.map(|limit| {
            let sessions = self.gate.0.sessions.clone();
            let stop = self.gate.0.stop.clone();
            tokio::spawn(async move {
                let tick = (limit / 10).clamp(Duration::from_millis(100), Duration::from_secs(5));
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(tick) => sessions.expire_idle(limit).await,
                        () = stop.cancelled() => return,
                    }
                }
            })
        });
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of descriptors, a connection reset before it
                        // was taken: the listener itself is still good.
                        tracing::warn!(%err, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            // An answer is written in pieces (the headers, each event of
            // the stream, its end): with Nagle's algorithm on, a piece
            // waits for the client's delayed acknowledgement of the last,
            // 40 ms a request on Linux.
            if let Err(err) = stream.set_nodelay(true) {
                tracing::debug!(%peer, %err, "TCP_NODELAY could not be set");
            }
            let gate = self.gate.clone();
            #[cfg(feature = "tls")]
            if let Some(tls) = &tls {
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HEADER_TIMEOUT, tls.accept(stream)).await {
                        Ok(Ok(stream)) => gate.connection(stream, peer).await,
                        Ok(Err(err)) => tracing::debug!(%peer, %err, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
                continue;
            }
            tokio::spawn(gate.connection(stream, peer));
        }
        self.gate.0.stop.cancel();
        if let Some(expiry) = expiry {
            expiry.abort();
        }
        Ok(())
    }
}

/// A bound TCP socket, for [`HttpServer::serve`].
#[derive(Debug)]
pub struct Listener(TcpListener);

impl Listener {
    /// The address it is bound to (with the port picked for port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// What every request passes through.
#[derive(Debug, Clone)]
struct Gate(Arc<GateInner>);

/// Makes the MCP service of a new session.
type Factory = Arc<dyn Fn() -> DshServer + Send + Sync>;

struct GateInner {
    mcp: StreamableHttpService<DshServer, sessions::Sessions>,
    sessions: sessions::Sessions,
    options: HttpOptions,
    stop: CancellationToken,
    /// The shell tool every session is an owner of.
    shell: Arc<SandboxedShell>,
    /// Each session's MCP service (a fork's too).
    factory: Factory,
}

impl std::fmt::Debug for GateInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateInner")
            .field("sessions", &self.sessions.len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

impl Gate {
    /// Serves one connection (HTTP/1.1) until it closes.
    async fn connection<S>(self, stream: S, peer: SocketAddr)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let service = hyper::service::service_fn(move |request| {
            let gate = self.clone();
            async move { Ok::<_, Infallible>(gate.handle(request).await) }
        });
        let served = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service)
            .await;
        if let Err(err) = served {
            tracing::debug!(%peer, %err, "connection ended with an error");
        }
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let inner = &self.0;
        match request.uri().path() {
            "/healthz" if request.method() == Method::GET || request.method() == Method::HEAD => {
                return answer::plain(StatusCode::OK, "");
            }
            "/healthz" => {
                return answer::plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
            }
            "/mcp" => {}
            path if rollout::is_route(path) => {}
            _ => {
                return answer::plain(
                    StatusCode::NOT_FOUND,
                    "Not Found: the MCP endpoint is /mcp\n",
                );
            }
        }
        let authorization = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        if !inner.options.token.admits(authorization) {
            const REFUSED: &str =
                "Unauthorized: send `Authorization: Bearer TOKEN` with the server's token";
            let mut response = if request.uri().path() == "/mcp" {
                answer::rpc_error(StatusCode::UNAUTHORIZED, answer::UNAUTHORIZED, REFUSED)
            } else {
                rollout::error(StatusCode::UNAUTHORIZED, REFUSED)
            };
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
        if rollout::is_route(request.uri().path()) {
            return rollout::handle(inner, request).await;
        }
        let session = request
            .headers()
            .get("mcp-session-id")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        match *request.method() {
            Method::POST => {
                if session.is_none() && inner.sessions.full() {
                    let error = SessionsError::Full {
                        max: inner.sessions.max(),
                    };
                    return answer::rpc_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        answer::SESSIONS_FULL,
                        &error.to_string(),
                    );
                }
                match self.checked_body(request).await {
                    Ok(request) => inner.mcp.handle(request).await,
                    Err(refused) => refused,
                }
            }
            Method::DELETE => {
                // A session that is not open (never was, ended, expired):
                // 404, as for its other requests. rmcp's 202 for one it
                // ended is 204 here: the request is done, not queued (and
                // the Python SDK takes only 200 and 204 for success).
                if let Some(id) = &session
                    && !inner.sessions.is_open(id)
                {
                    return answer::plain(StatusCode::NOT_FOUND, "Not Found: Session not found");
                }
                let mut response = inner.mcp.handle(request).await;
                if response.status() == StatusCode::ACCEPTED {
                    *response.status_mut() = StatusCode::NO_CONTENT;
                }
                response
            }
            _ => inner.mcp.handle(request).await,
        }
    }

    /// A JSON `POST` with its body read (within `max_request_bytes`) and
    /// parsed, or the answer refusing it: 413 past the bound, 400 with a
    /// JSON-RPC error for a body that is not a JSON-RPC message. Another
    /// media type is left to rmcp (415).
    async fn checked_body(
        &self,
        request: Request<Incoming>,
    ) -> Result<Request<Full<Bytes>>, Response<Body>> {
        let max = self.0.options.max_request_bytes;
        let json = request
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
                essence.trim().eq_ignore_ascii_case("application/json")
            });
        let (parts, body) = request.into_parts();
        let body = match Limited::new(body, max).collect().await {
            Ok(body) => body.to_bytes(),
            Err(err) if err.is::<LengthLimitError>() => {
                return Err(answer::plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!(
                        "Payload Too Large: the body is past this server's {max} bytes (--max-request-bytes)\n"
                    ),
                ));
            }
            Err(err) => {
                return Err(answer::plain(
                    StatusCode::BAD_REQUEST,
                    &format!("Bad Request: the body could not be read: {err}\n"),
                ));
            }
        };
        if json && let Some(error) = crate::transport::refusal(&body) {
            return Err(answer::respond(
                StatusCode::BAD_REQUEST,
                "application/json",
                error.into(),
            ));
        }
        Ok(Request::from_parts(parts, Full::new(body)))
    }
}
