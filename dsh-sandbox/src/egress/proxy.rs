//! The egress proxy: HTTP/1 (absolute-form requests and `CONNECT`) over
//! hyper, serving the listeners the sandboxes' inits hand over.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::unix::AsyncFd;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use super::AllowList;
use dsh_confine::{EgressListeners, Received};

/// Resolves the names the proxy connects to (the host's resolver by
/// default; a test or a host may answer itself).
#[async_trait::async_trait]
pub trait Resolve: Send + Sync + std::fmt::Debug {
    /// The addresses of `host` (a name or an IP literal, lower case,
    /// without brackets) at `port`.
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// The host's resolver (`getaddrinfo`, through tokio).
#[derive(Debug, Default)]
pub struct SystemResolver;

#[async_trait::async_trait]
impl Resolve for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// The bounds of one proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EgressLimits {
    /// Connections open at once across every owner (default 1024).
    pub connections: usize,
    /// Connections open at once from one shell (default 128); more are
    /// closed as they are accepted.
    pub per_shell: usize,
    /// The buffer of each direction of a connection, in bytes (default
    /// 16 KiB): bytes in flight are at most `connections × 4 ×` this.
    pub buffer: usize,
    /// How long a client may take to send a request's head (default 10 s).
    pub header_timeout: Duration,
    /// How long connecting to an allowed host may take (default 10 s).
    pub connect_timeout: Duration,
}

impl Default for EgressLimits {
    fn default() -> Self {
        EgressLimits {
            connections: 1024,
            per_shell: 128,
            buffer: 16 * 1024,
            header_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// The proxy one server runs for every confined shell of its owners: the
/// allow list, the resolver and the bounds. [`EgressProxy::serve`] serves
/// one confinement's listeners until it is dropped.
#[derive(Debug)]
pub(crate) struct EgressProxy {
    allowed: AllowList,
    resolver: Arc<dyn Resolve>,
    limits: EgressLimits,
    connections: Arc<Semaphore>,
}

type Body = BoxBody<Bytes, hyper::Error>;

fn full(text: String) -> Body {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

fn answer(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A tunnel to open once the connection handed its bytes over.
type Tunnel = (hyper::upgrade::OnUpgrade, TcpStream);

impl EgressProxy {
    /// A proxy serving `allowed` through `resolver` within `limits`.
    pub(crate) fn new(
        allowed: AllowList,
        resolver: Arc<dyn Resolve>,
        limits: EgressLimits,
    ) -> Self {
        EgressProxy {
            allowed,
            resolver,
            connections: Arc::new(Semaphore::new(limits.connections)),
            limits,
        }
    }

    /// Serves the listeners of one confinement (one per shell it starts)
    /// on the current tokio runtime, until the confinement is dropped:
    /// then every connection of its shells ends.
    pub(crate) fn serve(self: &Arc<Self>, listeners: EgressListeners) -> io::Result<()> {
        let proxy = Arc::clone(self);
        tokio::runtime::Handle::try_current()
            .map_err(io::Error::other)?
            .spawn(async move {
                // SAFETY: `EgressListeners` owns its descriptor for its
                // whole life and always reports that one.
                let registered = unsafe {
                    AsyncFd::register_with_interest(listeners, tokio::io::Interest::READABLE)
                };
                match registered {
                    Ok(listeners) => proxy.serve_owner(listeners).await,
                    Err(err) => {
                        tracing::error!(%err, "egress: the listeners' socket cannot be polled")
                    }
                }
            });
        Ok(())
    }

    async fn serve_owner(self: Arc<Self>, listeners: AsyncFd<EgressListeners>) {
        let mut current: Option<TcpListener> = None;
        let mut connections = JoinSet::new();
        let per_shell = Arc::new(Semaphore::new(self.limits.per_shell));
        loop {
            tokio::select! {
                ready = listeners.readable() => {
                    let Ok(mut guard) = ready else { break };
                    match guard.get_inner().receive() {
                        Ok(Received::Listener(fd)) => match listener(fd) {
                            Ok(l) => current = Some(l),
                            Err(err) => tracing::error!(%err, "egress: the shell's listener is not usable"),
                        },
                        Ok(Received::Nothing) => guard.clear_ready(),
                        Ok(Received::Closed) => break,
                        Ok(_) => {}
                        Err(err) => {
                            tracing::error!(%err, "egress: receiving a shell's listener failed");
                            break;
                        }
                    }
                }
                accepted = accept(current.as_ref()) => {
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        Err(err) => {
                            // Out of descriptors, say: give the others a
                            // moment rather than spin on the same error.
                            tracing::warn!(%err, "egress: accepting a connection failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let (Ok(shell), Ok(server)) = (
                        Arc::clone(&per_shell).try_acquire_owned(),
                        Arc::clone(&self.connections).try_acquire_owned(),
                    ) else {
                        tracing::warn!("egress: connection refused, the proxy's connection limit is reached");
                        continue;
                    };
                    let proxy = Arc::clone(&self);
                    connections.spawn(async move {
                        proxy.connection(stream).await;
                        drop((shell, server));
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        // Dropping the set aborts every connection of the owner's shells.
        connections.shutdown().await;
    }

    /// One client connection: its requests, then its tunnel if it asked
    /// for one.
    async fn connection(self: Arc<Self>, stream: TcpStream) {
        let (tunnels, mut tunnel) = mpsc::channel::<Tunnel>(1);
        let proxy = Arc::clone(&self);
        let service = hyper::service::service_fn(move |req| {
            let proxy = Arc::clone(&proxy);
            let tunnels = tunnels.clone();
            async move { Ok::<_, hyper::Error>(proxy.handle(req, tunnels).await) }
        });
        let served = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_timeout)
            .max_buf_size(self.limits.buffer.max(8192))
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades()
            .await;
        if let Err(err) = served {
            tracing::debug!(%err, "egress: client connection ended");
        }
        if let Ok((upgrade, mut upstream)) = tunnel.try_recv() {
            match upgrade.await {
                Ok(upgraded) => {
                    let mut client = TokioIo::new(upgraded);
                    let size = self.limits.buffer;
                    let _ = tokio::io::copy_bidirectional_with_sizes(
                        &mut client,
                        &mut upstream,
                        size,
                        size,
                    )
                    .await;
                }
                Err(err) => tracing::debug!(%err, "egress: CONNECT upgrade failed"),
            }
        }
    }

    /// One request: refused, tunnelled (`CONNECT`) or forwarded.
    async fn handle(
        &self,
        mut req: Request<Incoming>,
        tunnels: mpsc::Sender<Tunnel>,
    ) -> Response<Body> {
        let Some((host, port)) = target(&req) else {
            return answer(
                StatusCode::BAD_REQUEST,
                crate::contract::egress_not_proxy_request(),
            );
        };
        if !self.allowed.allows(&host, port) {
            tracing::warn!(%host, port, "egress refused: {host}:{port} is not in --allow-domain");
            return answer(
                StatusCode::FORBIDDEN,
                crate::contract::egress_refusal(&host, port),
            );
        }
        let upstream = match self.connect(&host, port).await {
            Ok(stream) => stream,
            Err(err) => {
                tracing::info!(%host, port, %err, "egress: connecting failed");
                return answer(
                    StatusCode::BAD_GATEWAY,
                    crate::contract::egress_unreachable(&host, port, &err),
                );
            }
        };
        if req.method() == Method::CONNECT {
            let upgrade = hyper::upgrade::on(&mut req);
            if tunnels.try_send((upgrade, upstream)).is_err() {
                return answer(
                    StatusCode::BAD_REQUEST,
                    crate::contract::egress_not_proxy_request(),
                );
            }
            return Response::new(full(String::new()));
        }
        self.forward(req, upstream, &host, port).await
    }

    /// Connects to the first address of `host:port` that answers.
    async fn connect(&self, host: &str, port: u16) -> io::Result<TcpStream> {
        let addrs = self.resolver.resolve(host, port).await?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
        for addr in addrs {
            match tokio::time::timeout(self.limits.connect_timeout, TcpStream::connect(addr)).await
            {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(err)) => last = err,
                Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "connecting timed out"),
            }
        }
        Err(last)
    }

    /// Sends `req` (absolute-form) in origin form to `upstream`, its `Host`
    /// the URI's authority, without hop-by-hop headers.
    async fn forward(
        &self,
        mut req: Request<Incoming>,
        upstream: TcpStream,
        host: &str,
        port: u16,
    ) -> Response<Body> {
        let origin = req
            .uri()
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        // The URL's host and port, without any user information.
        let authority = match req.uri().port_u16() {
            Some(p) if host.contains(':') => format!("[{host}]:{p}"),
            Some(p) => format!("{host}:{p}"),
            None if host.contains(':') => format!("[{host}]"),
            None => host.to_owned(),
        };
        match origin.parse() {
            Ok(uri) => *req.uri_mut() = uri,
            Err(_) => {
                return answer(
                    StatusCode::BAD_REQUEST,
                    crate::contract::egress_not_proxy_request(),
                );
            }
        }
        strip_hop_by_hop(req.headers_mut());
        if let Ok(value) = HeaderValue::from_str(&authority) {
            req.headers_mut().insert(header::HOST, value);
        }
        let handshake = hyper::client::conn::http1::Builder::new()
            .max_buf_size(self.limits.buffer.max(8192))
            .handshake::<_, Incoming>(TokioIo::new(upstream))
            .await;
        let (mut sender, conn) = match handshake {
            Ok(parts) => parts,
            Err(err) => return self.upstream_failed(host, port, err),
        };
        // The upstream connection lives as long as the response's body.
        tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(%err, "egress: upstream connection ended");
            }
        });
        match sender.send_request(req).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, body.boxed())
            }
            Err(err) => self.upstream_failed(host, port, err),
        }
    }

    fn upstream_failed(&self, host: &str, port: u16, err: hyper::Error) -> Response<Body> {
        tracing::info!(%host, port, %err, "egress: the request upstream failed");
        answer(
            StatusCode::BAD_GATEWAY,
            crate::contract::egress_unreachable(host, port, &io::Error::other(err)),
        )
    }
}

/// The listener a shell's init sent, ready for tokio.
fn listener(fd: OwnedFd) -> io::Result<TcpListener> {
    let std = std::net::TcpListener::from(fd);
    std.set_nonblocking(true)?;
    TcpListener::from_std(std)
}

/// Accepts on `listener`, or waits forever without one.
async fn accept(listener: Option<&TcpListener>) -> io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// The `host` (lower case, IPv6 without brackets) and port a proxy request
/// names: `CONNECT`'s authority, or an absolute-form `http:` URI's (80 by
/// default). `None` for anything else (origin-form, other schemes).
fn target<B>(req: &Request<B>) -> Option<(String, u16)> {
    let uri = req.uri();
    let host = uri.host()?;
    let port = if req.method() == Method::CONNECT {
        uri.port_u16()?
    } else {
        if uri.scheme_str() != Some("http") {
            return None;
        }
        uri.port_u16().unwrap_or(80)
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host.to_ascii_lowercase(), port))
}

/// Removes the hop-by-hop headers (RFC 9110 7.6.1) and those `Connection`
/// names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_connect_authorities_and_absolute_http_uris() {
        let req = |method: Method, uri: &str| {
            Request::builder().method(method).uri(uri).body(()).unwrap()
        };
        assert_eq!(
            target(&req(Method::CONNECT, "Pypi.Org:443")),
            Some(("pypi.org".to_owned(), 443))
        );
        assert_eq!(
            target(&req(Method::CONNECT, "[::1]:8443")),
            Some(("::1".to_owned(), 8443))
        );
        assert_eq!(
            target(&req(Method::GET, "http://a.example.test/x?y")),
            Some(("a.example.test".to_owned(), 80))
        );
        assert_eq!(target(&req(Method::GET, "/x")), None);
        assert_eq!(target(&req(Method::GET, "https://a.example.test/")), None);
    }
}
