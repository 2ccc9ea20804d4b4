//! The MCP sessions of the HTTP server: rmcp's in-memory session manager,
//! with what dsh-mcp adds around it: a bound on their number, the end of
//! idle ones, the owner's shell ended with its session, and a call whose
//! connection dropped cancelled.
//!
//! The book here is the server's one record of its sessions; what an owner
//! holds in the shell (its shell, view, mode) is the shell's pool's, and
//! only this module ends it ([`Sessions::close_session`],
//! [`Sessions::settle`]). No other map is kept per owner: the client an
//! approval asks goes with each call (`approve::asked_by`).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use rmcp::model::{
    CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification, ClientRequest,
    InitializeRequestParams, JsonRpcNotification, Notification, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use dsh_sandbox::SandboxedShell;

/// Why a session could not be made or reached.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// `--max-sessions` are open.
    #[error(
        "this server holds its limit of {max} sessions: end one (HTTP DELETE with its Mcp-Session-Id) or wait until an idle one expires"
    )]
    Full {
        /// The bound.
        max: usize,
    },
    /// rmcp's session manager failed.
    #[error(transparent)]
    Session(#[from] LocalSessionManagerError),
}

/// What the server knows of one session's use.
#[derive(Debug)]
struct Activity {
    /// When its last request came or its last call ended.
    last: Instant,
    /// Its requests whose answers are still being streamed.
    in_flight: usize,
    /// What its client sent with `initialize` (a fork's session is
    /// initialized with the same).
    init: Option<Arc<InitializeRequestParams>>,
}

/// The open sessions, and how many are being made.
#[derive(Debug, Default)]
struct Book {
    open: HashMap<SessionId, Activity>,
    making: usize,
}

#[derive(Debug)]
struct Shared {
    inner: LocalSessionManager,
    book: Mutex<Book>,
    max: usize,
    shell: Arc<SandboxedShell>,
}

/// The sessions, shared by every connection.
#[derive(Debug, Clone)]
pub(crate) struct Sessions {
    shared: Arc<Shared>,
}

impl Sessions {
    /// At most `max` sessions at once, each the owner of the same name in
    /// `shell`.
    pub(crate) fn new(max: usize, shell: Arc<SandboxedShell>) -> Self {
        let mut config = SessionConfig::default();
        // Idle sessions are ended here (`expire_idle`), counting a running
        // call as use; rmcp's own timer would end a session in a long call.
        config.keep_alive = None;
        // A dropped stream cancels its call: no stream is resumed.
        config.sse_retry = None;
        let mut inner = LocalSessionManager::default();
        inner.session_config = config;
        Sessions {
            shared: Arc::new(Shared {
                inner,
                book: Mutex::new(Book::default()),
                max,
                shell,
            }),
        }
    }

    /// How many sessions are open.
    pub(crate) fn len(&self) -> usize {
        self.shared.book().open.len()
    }

    /// Whether one more session would pass the bound.
    pub(crate) fn full(&self) -> bool {
        self.len() >= self.shared.max
    }

    /// The bound.
    pub(crate) fn max(&self) -> usize {
        self.shared.max
    }

    /// Ends the sessions with no call running whose last request is
    /// `limit` old or older.
    pub(crate) async fn expire_idle(&self, limit: Duration) {
        let idle: Vec<SessionId> = self
            .shared
            .book()
            .open
            .iter()
            .filter(|(_, a)| a.in_flight == 0 && a.last.elapsed() >= limit)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            tracing::info!(session = %id, "ending an idle session");
            if let Err(err) = self.close_session(&id).await {
                tracing::warn!(session = %id, %err, "ending an idle session failed");
            }
        }
    }

    /// Whether the session `id` is open (made and not ended).
    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.shared.book().open.contains_key(id)
    }

    /// Counts a request of the session `id` as use.
    pub(crate) fn touch(&self, id: &str) {
        if let Some(activity) = self.shared.book().open.get_mut(id) {
            activity.last = Instant::now();
        }
    }

    /// After an operation on the owner `id` outside a call (a harness
    /// endpoint's): its use counted while its session is open; else what
    /// the operation made for the owner (a layer, a shell) is forgotten,
    /// as its session's end forgot the rest.
    pub(crate) async fn settle(&self, id: &str) {
        if self.is_open(id) {
            self.touch(id);
        } else {
            self.shared.shell.close_owner(id).await;
        }
    }

    /// What the client of the open session `id` sent with `initialize`:
    /// `None` when no such session is open, `Some(None)` while it is being
    /// initialized.
    pub(crate) fn initialized_with(
        &self,
        id: &str,
    ) -> Option<Option<Arc<InitializeRequestParams>>> {
        self.shared.book().open.get(id).map(|a| a.init.clone())
    }
}

/// A session being made, counted against the bound until it is open (or
/// the making was dropped).
struct Making<'a>(&'a Shared);

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.0.book().making -= 1;
    }
}

impl Shared {
    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SessionManager for Sessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        {
            // Counted and reserved under one lock: concurrent initializes
            // cannot pass the bound together.
            let mut book = self.shared.book();
            if book.open.len() + book.making >= self.shared.max {
                return Err(SessionsError::Full {
                    max: self.shared.max,
                });
            }
            book.making += 1;
        }
        let making = Making(&self.shared);
        let (id, transport) = self.shared.inner.create_session().await?;
        // Open and no longer being made, under one lock.
        std::mem::forget(making);
        let mut book = self.shared.book();
        book.making -= 1;
        book.open.insert(
            id.clone(),
            Activity {
                last: Instant::now(),
                in_flight: 0,
                init: None,
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let params = match &message {
            ClientJsonRpcMessage::Request(request) => match &request.request {
                ClientRequest::InitializeRequest(init) => Some(Arc::new(init.params.clone())),
                _ => None,
            },
            _ => None,
        };
        let answer = self.shared.inner.initialize_session(id, message).await?;
        if let Some(activity) = self.shared.book().open.get_mut(id) {
            activity.init = params;
        }
        Ok(answer)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.shared.inner.has_session(id).await?)
    }

    /// Ends the session: no request of it is taken any more (404), then
    /// its shell and that shell's whole process tree end.
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let known = self.shared.book().open.remove(id).is_some();
        let closed = self.shared.inner.close_session(id).await;
        if known {
            self.shared.shell.close_owner(id).await;
            tracing::info!(session = %id, "session ended");
        }
        Ok(closed?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let request = match &message {
            ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        let guard = CallGuard::start(self.clone(), id.clone(), request);
        let stream = self.shared.inner.create_stream(id, message).await?;
        Ok(Watched {
            inner: Box::pin(stream),
            guard: Some(guard),
        })
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        Ok(self.shared.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        let stream = self.shared.inner.create_standalone_stream(id).await?;
        Ok(Watched {
            inner: Box::pin(stream),
            guard: None,
        })
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        Ok(self.shared.inner.resume(id, last_event_id).await?)
    }
}

/// One request's answer being streamed: counts as use of its session
/// while it lasts, and cancels the request when the stream is dropped
/// before its end (the client closed the connection).
#[derive(Debug)]
struct CallGuard {
    sessions: Sessions,
    session: SessionId,
    request: Option<RequestId>,
    finished: bool,
}

impl CallGuard {
    fn start(sessions: Sessions, session: SessionId, request: Option<RequestId>) -> Self {
        if let Some(activity) = sessions.shared.book().open.get_mut(&session) {
            activity.last = Instant::now();
            activity.in_flight += 1;
        }
        CallGuard {
            sessions,
            session,
            request,
            finished: false,
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(activity) = self.sessions.shared.book().open.get_mut(&self.session) {
            activity.last = Instant::now();
            activity.in_flight = activity.in_flight.saturating_sub(1);
        }
        let Some(request) = self.request.take() else {
            return;
        };
        if self.finished {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::info!(session = %self.session, ?request, "the client dropped the connection of a running request: cancelling it");
        let sessions = self.sessions.clone();
        let session = self.session.clone();
        runtime.spawn(async move {
            let cancel = ClientJsonRpcMessage::Notification(JsonRpcNotification {
                jsonrpc: Default::default(),
                notification: ClientNotification::CancelledNotification(Notification::new(
                    CancelledNotificationParam::new(
                        Some(request),
                        Some("the client closed the connection".to_owned()),
                    ),
                )),
            });
            // The session may have ended meanwhile: nothing to cancel.
            let _ = sessions.shared.inner.accept_message(&session, cancel).await;
        });
    }
}

/// An answer stream, with its [`CallGuard`] when it answers a request.
/// Its events carry no id: a stream that dropped is not resumed (its call
/// was cancelled), and an id would have the client try.
struct Watched {
    inner: Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>,
    guard: Option<CallGuard>,
}

impl Stream for Watched {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx).map(|event| {
            event.map(|mut event| {
                event.event_id = None;
                event
            })
        });
        if let Poll::Ready(None) = polled
            && let Some(mut guard) = self.guard.take()
        {
            guard.finished = true;
        }
        polled
    }
}
