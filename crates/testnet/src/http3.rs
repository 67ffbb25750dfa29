//! An HTTP/3 server for tests (h3 over quinn): it answers every request of every connection
//! an endpoint accepts. `x-conn` names the connection (from 1, so a test sees reuse);
//! `/echo` answers with the request's body, `/too-early` with 425 once per connection to a
//! request that came in 0-RTT, `/425` with 425 always, `/reject-once` resets the stream with
//! H3_REQUEST_REJECTED once per connection, `/close-once` closes the QUIC connection under
//! the first such request the server reads (and answers the later ones), `/strict` answers
//! 421 to a host its ClientHello did not name, anything else gets `ok`. It accepts 0-RTT
//! (with a configuration from [`crate::TlsMaterial::quic_server`]) and answers in 0.5-RTT.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::{Buf, Bytes, BytesMut};
use http::Response;

/// What a test HTTP/3 server has seen.
#[derive(Debug, Default)]
pub struct Http3Stats {
    connections: AtomicUsize,
    requests: AtomicUsize,
    /// `/close-once` closed a connection.
    closed_once: AtomicBool,
}

impl Http3Stats {
    /// QUIC connections that completed their HTTP/3 set-up.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests answered.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Serves HTTP/3 on every connection `endpoint` accepts, on the current runtime, until the
/// endpoint closes. Its TLS configuration must offer ALPN `h3`.
pub fn serve(endpoint: quinn::Endpoint) -> Arc<Http3Stats> {
    serve_counted(endpoint, || {})
}

/// [`serve`], calling `handshake` for every QUIC handshake that completes.
pub fn serve_counted(
    endpoint: quinn::Endpoint,
    handshake: impl Fn() + Send + Sync + 'static,
) -> Arc<Http3Stats> {
    let stats = Arc::new(Http3Stats::default());
    let counted = Arc::clone(&stats);
    let handshake = Arc::new(handshake);
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let stats = Arc::clone(&counted);
            let handshake = Arc::clone(&handshake);
            tokio::spawn(async move {
                // 0.5-RTT (RFC 9001 §4.1.1): requests a resuming client sent in 0-RTT are
                // read and answered before its handshake completes, one round trip sooner.
                let Ok(connecting) = incoming.accept() else {
                    return;
                };
                // Set once the handshake is done: a request read before then came in 0-RTT
                // (the client's 1-RTT data follows its Finished, which ends the handshake).
                let confirmed = Arc::new(AtomicBool::new(false));
                let conn = match connecting.into_0rtt() {
                    Ok((conn, done)) => {
                        let confirmed = Arc::clone(&confirmed);
                        tokio::spawn(async move {
                            if done.await {
                                confirmed.store(true, Ordering::SeqCst);
                                handshake();
                            }
                        });
                        conn
                    }
                    Err(connecting) => match connecting.await {
                        Ok(conn) => {
                            confirmed.store(true, Ordering::SeqCst);
                            handshake();
                            conn
                        }
                        Err(_) => return,
                    },
                };
                // The name the client asked for (RFC 9114 §3.3: a coalesced request names
                // another host in `:authority`).
                let sni = conn
                    .handshake_data()
                    .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
                    .and_then(|d| d.server_name);
                let quic = conn.clone();
                let Ok(mut h3) = h3::server::builder()
                    .build::<_, Bytes>(h3_quinn::Connection::new(conn))
                    .await
                else {
                    return;
                };
                let number = stats.connections.fetch_add(1, Ordering::SeqCst) + 1;
                let connection = Arc::new(PerConnection {
                    number,
                    sni,
                    quic,
                    confirmed,
                    too_early: AtomicBool::new(false),
                    rejected: AtomicBool::new(false),
                });
                while let Ok(Some(resolver)) = h3.accept().await {
                    let stats = Arc::clone(&stats);
                    let connection = Arc::clone(&connection);
                    tokio::spawn(async move {
                        if let Ok((request, stream)) = resolver.resolve_request().await {
                            answer(request, stream, &connection, &stats).await;
                        }
                    });
                }
            });
        }
    });
    stats
}

/// What the server knows of one connection.
struct PerConnection {
    /// From 1, in the order connections were set up.
    number: usize,
    /// The server name of its ClientHello.
    sni: Option<String>,
    /// The QUIC connection itself, for `/close-once`.
    quic: quinn::Connection,
    /// Its handshake is done: what it reads from now on did not come in 0-RTT.
    confirmed: Arc<AtomicBool>,
    /// `/too-early` was answered 425 on it.
    too_early: AtomicBool,
    /// `/reject-once` was rejected on it.
    rejected: AtomicBool,
}

type ServerStream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Answers one request: `/echo` with its body; `/too-early` with 425 the first time on a
/// connection that a request reaches it in 0-RTT, before the handshake is done (RFC 8470
/// §5.2); `/425` with 425 always; `/reject-once` by resetting the stream with
/// H3_REQUEST_REJECTED the first time on a connection (RFC 9114 §4.1.1: not processed);
/// `/strict` with 421 when `:authority` names another host than the ClientHello did (RFC
/// 9110 §15.5.20); `/close-once` by closing the whole QUIC connection, unanswered, the first
/// time on the server (a connection that goes away under a request); anything else with `ok`.
async fn answer(
    request: http::Request<()>,
    mut stream: ServerStream,
    connection: &PerConnection,
    stats: &Http3Stats,
) {
    let path = request.uri().path();
    if path == "/reject-once" && !connection.rejected.swap(true, Ordering::SeqCst) {
        stream.stop_stream(h3::error::Code::H3_REQUEST_REJECTED);
        return;
    }
    let mut body = BytesMut::new();
    while let Ok(Some(mut chunk)) = stream.recv_data().await {
        body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    stats.requests.fetch_add(1, Ordering::SeqCst);
    if path == "/close-once" && !stats.closed_once.swap(true, Ordering::SeqCst) {
        // H3_INTERNAL_ERROR: not a graceful end, the connection is simply gone.
        connection
            .quic
            .close(0x102u32.into(), b"closed under the request");
        return;
    }
    let misdirected =
        path == "/strict" && request.uri().host().map(str::to_owned) != connection.sni;
    let early = !connection.confirmed.load(Ordering::SeqCst);
    let too_early =
        (path == "/too-early" && early && !connection.too_early.swap(true, Ordering::SeqCst))
            || path == "/425";
    let status = if too_early {
        http::StatusCode::TOO_EARLY
    } else if misdirected {
        http::StatusCode::MISDIRECTED_REQUEST
    } else {
        http::StatusCode::OK
    };
    let answer = if path == "/echo" {
        body.freeze()
    } else {
        Bytes::from_static(b"ok")
    };
    let head = Response::builder()
        .status(status)
        .header("x-conn", connection.number.to_string())
        .body(())
        .unwrap_or_default();
    if stream.send_response(head).await.is_ok() && stream.send_data(answer).await.is_ok() {
        let _ = stream.finish().await;
    }
}
