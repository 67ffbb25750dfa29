//! Real HTTP servers for tests: hyper's HTTP/1.1 server and the h2 crate's HTTP/2 server,
//! over TLS (the protocol chosen by ALPN) or cleartext, on any listener (loopback or a test
//! network's server namespace).
//!
//! Every response carries `x-conn` (the server's number for the connection, from 1, so a
//! test sees reuse) and `x-host` (the `host` header or `:authority` the request named).
//! Paths:
//!
//! - `/close`: HTTP/1.1 answers with `connection: close` and closes after the response;
//! - `/status/N`: answers with status `N` (for example 421);
//! - `/status-on-1/N`: answers with status `N` on the server's first connection, `ok` on the
//!   others (a connection that is not authoritative for every name it could serve);
//! - `/sleep/MS`: answers after `MS` milliseconds;
//! - `/bytes/N`: a body of `N` bytes;
//! - `/echo`: reads the whole request body, then answers with it, names the request's
//!   trailers in `x-trailers` (comma-separated) and its target as the server read it (path
//!   and query) in `x-target`;
//! - `/reset`: misbehaves: HTTP/2 resets the stream (`RST_STREAM` with `INTERNAL_ERROR`),
//!   HTTP/1.1 closes the connection without answering;
//! - `/silent`: never answers (the stream or connection stays open);
//! - `/goaway`: HTTP/2 sends the response head and half the body, then `GOAWAY` with
//!   `INTERNAL_ERROR` and closes the connection mid-stream;
//! - `/alt-svc/h3/PORT`: answers `ok` with `alt-svc: h3=":PORT"; ma=3600` (RFC 7838), and
//!   `/alt-svc/clear` with `alt-svc: clear`;
//! - anything else: `ok`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

/// How long a TLS handshake may take before the server gives up on the connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// How a test HTTP server behaves.
#[derive(Clone, Debug, Default)]
pub struct HttpOptions {
    /// TLS: the server configuration (its ALPN ids choose the protocol: `h2` gives HTTP/2,
    /// anything else HTTP/1.1). `None` serves cleartext.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// On cleartext, speak HTTP/2 with prior knowledge instead of HTTP/1.1.
    pub cleartext_h2: bool,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS (default: the h2 crate's, unlimited).
    pub max_streams: Option<u32>,
    /// Wait this long after accepting a connection before the TLS handshake (a slow server).
    pub accept_delay: Option<Duration>,
    /// HTTP/2: the first this many connections send GOAWAY (last stream 0, NO_ERROR) as soon
    /// as the handshake is done, before reading any request, and close (a server shutting
    /// down as clients arrive, RFC 9113 §6.8).
    pub goaway_first: usize,
}

/// What a test HTTP server has seen.
#[derive(Debug, Default)]
pub struct HttpStats {
    connections: AtomicUsize,
    requests: AtomicUsize,
    open: AtomicUsize,
    drops: tokio::sync::Notify,
}

impl HttpStats {
    /// TCP connections accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests answered.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Connections still open (accepted and not yet closed by either side).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Closes every open connection now, from the server's side (the listener keeps
    /// accepting new ones).
    pub fn drop_connections(&self) {
        self.drops.notify_waiters();
    }
}

/// Serves HTTP on `listener` until the task is dropped or the runtime ends. Returns at once;
/// the returned stats fill in as clients come.
pub fn serve(listener: TcpListener, options: HttpOptions) -> Arc<HttpStats> {
    serve_counted(listener, options, || {})
}

/// [`serve`], calling `on_accept` for each accepted connection.
pub(crate) fn serve_counted(
    listener: TcpListener,
    options: HttpOptions,
    on_accept: impl Fn() + Send + 'static,
) -> Arc<HttpStats> {
    let stats = Arc::new(HttpStats::default());
    let s = Arc::clone(&stats);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            on_accept();
            let n = s.connections.fetch_add(1, Ordering::SeqCst) + 1;
            s.open.fetch_add(1, Ordering::SeqCst);
            let (s, options) = (Arc::clone(&s), options.clone());
            tokio::spawn(async move {
                let dropped = s.drops.notified();
                let serve = async {
                    if let Some(delay) = options.accept_delay {
                        tokio::time::sleep(delay).await;
                    }
                    match &options.tls {
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(config));
                            // A handshake that never completes (a stalled path) is given
                            // up after a while, as a real server would.
                            let handshake =
                                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
                            if let Ok(Ok(tls)) = handshake.await {
                                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                                serve_one(tls, h2, n, &s, &options).await;
                            }
                        }
                        None => serve_one(tcp, options.cleartext_h2, n, &s, &options).await,
                    }
                };
                // Dropping the serving future closes the socket.
                tokio::select! {
                    () = serve => {}
                    () = dropped => {}
                }
                s.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    stats
}

async fn serve_one<T>(io: T, h2: bool, conn: usize, stats: &Arc<HttpStats>, options: &HttpOptions)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if h2 {
        let mut builder = h2::server::Builder::new();
        if let Some(n) = options.max_streams {
            builder.max_concurrent_streams(n);
        }
        let Ok(mut c) = builder.handshake::<_, Bytes>(io).await else {
            return;
        };
        if conn <= options.goaway_first {
            // No stream has been read yet, so the GOAWAY names stream 0 as the last processed.
            c.abrupt_shutdown(h2::Reason::NO_ERROR);
            let _ = std::future::poll_fn(|cx| c.poll_closed(cx)).await;
            return;
        }
        // A stream task asks for GOAWAY through this; the accept loop owns the connection.
        let goaway = Arc::new(tokio::sync::Notify::new());
        loop {
            let accepted = tokio::select! {
                a = c.accept() => a,
                () = goaway.notified() => {
                    c.abrupt_shutdown(h2::Reason::INTERNAL_ERROR);
                    // Flush the GOAWAY, then the connection ends.
                    let _ = std::future::poll_fn(|cx| c.poll_closed(cx)).await;
                    return;
                }
            };
            let Some(Ok((request, mut respond))) = accepted else {
                break;
            };
            let stats = Arc::clone(stats);
            let goaway = Arc::clone(&goaway);
            tokio::spawn(async move {
                let host = request.uri().authority().map(ToString::to_string);
                match request.uri().path() {
                    "/silent" => {
                        stats.requests.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        drop(respond);
                        return;
                    }
                    "/reset" => {
                        stats.requests.fetch_add(1, Ordering::SeqCst);
                        respond.send_reset(h2::Reason::INTERNAL_ERROR);
                        return;
                    }
                    "/goaway" => {
                        stats.requests.fetch_add(1, Ordering::SeqCst);
                        let head = Response::builder().body(()).unwrap_or_default();
                        let mut tx = respond.send_response(head, false).ok();
                        if let Some(tx) = &mut tx {
                            let _ = tx.send_data(Bytes::from_static(b"half"), false);
                        }
                        // Let the head and the first half reach the client first. The
                        // stream stays open (dropping it would reset it) until the
                        // connection goes away under it.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        goaway.notify_one();
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        drop(tx);
                        return;
                    }
                    _ => {}
                }
                let (request, mut incoming) = request.into_parts();
                let echo = if request.uri.path() == "/echo" {
                    let mut body = Vec::new();
                    while let Some(Ok(data)) = incoming.data().await {
                        let _ = incoming.flow_control().release_capacity(data.len());
                        body.extend_from_slice(&data);
                    }
                    let trailers = incoming.trailers().await.ok().flatten().unwrap_or_default();
                    Some(Echo::new(body.into(), &trailers))
                } else {
                    None
                };
                let request = Request::from_parts(request, ());
                let (head, body) = answer(request, host, conn, &stats, echo).await;
                let end = body.is_empty();
                if let Ok(mut tx) = respond.send_response(head, end)
                    && !end
                {
                    let _ = tx.send_data(body, true);
                }
            });
        }
    } else {
        let stats = Arc::clone(stats);
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let stats = Arc::clone(&stats);
            async move {
                let host = request
                    .headers()
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_owned);
                if request.uri().path() == "/silent" {
                    stats.requests.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                if request.uri().path() == "/reset" {
                    stats.requests.fetch_add(1, Ordering::SeqCst);
                    // An error from the service makes hyper close the connection unanswered.
                    return Err(std::io::Error::other("misbehaving on purpose"));
                }
                let (request, incoming) = request.into_parts();
                let echo = if request.uri.path() == "/echo" {
                    use http_body_util::BodyExt;
                    let collected = incoming.collect().await.ok();
                    let trailers = collected
                        .as_ref()
                        .and_then(|c| c.trailers().cloned())
                        .unwrap_or_default();
                    let body = collected.map(|c| c.to_bytes()).unwrap_or_default();
                    Some(Echo::new(body, &trailers))
                } else {
                    None
                };
                let request = Request::from_parts(request, ());
                let (head, body) = answer(request, host, conn, &stats, echo).await;
                let (parts, ()) = head.into_parts();
                Ok::<_, std::io::Error>(Response::from_parts(parts, Full::new(body)))
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(io), service)
            .await;
    }
}

/// What `/echo` read from a request.
struct Echo {
    body: Bytes,
    trailers: String,
}

impl Echo {
    fn new(body: Bytes, trailers: &http::HeaderMap) -> Self {
        let names: Vec<&str> = trailers.keys().map(http::HeaderName::as_str).collect();
        Self {
            body,
            trailers: names.join(","),
        }
    }
}

/// The response to one request (see the module docs for the paths).
async fn answer(
    request: Request<()>,
    host: Option<String>,
    conn: usize,
    stats: &HttpStats,
    echo: Option<Echo>,
) -> (Response<()>, Bytes) {
    stats.requests.fetch_add(1, Ordering::SeqCst);
    let path = request.uri().path().to_owned();
    let mut response = Response::builder()
        .header("x-conn", conn.to_string())
        .header("x-host", host.unwrap_or_default());
    let mut body = Bytes::from_static(b"ok");
    if let Some(echo) = echo {
        let target = request.uri().path_and_query().map_or("", |t| t.as_str());
        response = response
            .header("x-trailers", echo.trailers)
            .header("x-target", target);
        body = echo.body;
    } else if path == "/close" {
        response = response.header(http::header::CONNECTION, "close");
    } else if let Some(alt) = path.strip_prefix("/alt-svc/") {
        let value = match alt.strip_prefix("h3/").map(str::parse::<u16>) {
            Some(Ok(port)) => format!("h3=\":{port}\"; ma=3600"),
            _ => "clear".to_owned(),
        };
        response = response.header(http::header::ALT_SVC, value);
    } else if let Some(code) = path.strip_prefix("/status/") {
        let status = code
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::BAD_REQUEST);
        response = response.status(status);
    } else if let Some(code) = path.strip_prefix("/status-on-1/") {
        if conn == 1 {
            let status = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok());
            response = response.status(status.unwrap_or(StatusCode::BAD_REQUEST));
        }
    } else if let Some(ms) = path.strip_prefix("/sleep/") {
        let ms = ms.parse::<u64>().unwrap_or(0).min(60_000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    } else if let Some(n) = path.strip_prefix("/bytes/") {
        let n = n.parse::<usize>().unwrap_or(0).min(16 << 20);
        body = Bytes::from(vec![b'x'; n]);
    }
    let head = response.body(()).unwrap_or_else(|_| Response::new(()));
    (head, body)
}
