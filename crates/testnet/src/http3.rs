//! An HTTP/3 server for tests (h3 over quinn): it answers every request of every connection
//! an endpoint accepts. `x-conn` names the connection (from 1, so a test sees reuse);
//! `/echo` answers with the request's body, `/too-early` with 425 Too Early the first time on
//! each connection (RFC 8470 §5.2), anything else with `ok`. It accepts 0-RTT (with a
//! configuration from [`crate::TlsMaterial::quic_server`]) and answers in 0.5-RTT.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::{Buf, Bytes, BytesMut};
use http::Response;

/// What a test HTTP/3 server has seen.
#[derive(Debug, Default)]
pub struct Http3Stats {
    connections: AtomicUsize,
    requests: AtomicUsize,
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
                let conn = match connecting.into_0rtt() {
                    Ok((conn, done)) => {
                        tokio::spawn(async move {
                            if done.await {
                                handshake();
                            }
                        });
                        conn
                    }
                    Err(connecting) => match connecting.await {
                        Ok(conn) => {
                            handshake();
                            conn
                        }
                        Err(_) => return,
                    },
                };
                let Ok(mut h3) = h3::server::builder()
                    .build::<_, Bytes>(h3_quinn::Connection::new(conn))
                    .await
                else {
                    return;
                };
                let number = stats.connections.fetch_add(1, Ordering::SeqCst) + 1;
                let too_early = Arc::new(AtomicBool::new(false));
                while let Ok(Some(resolver)) = h3.accept().await {
                    let stats = Arc::clone(&stats);
                    let too_early = Arc::clone(&too_early);
                    tokio::spawn(async move {
                        let Ok((request, mut stream)) = resolver.resolve_request().await else {
                            return;
                        };
                        let mut body = BytesMut::new();
                        while let Ok(Some(mut chunk)) = stream.recv_data().await {
                            body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
                        }
                        stats.requests.fetch_add(1, Ordering::SeqCst);
                        let answer = if request.uri().path() == "/echo" {
                            body.freeze()
                        } else {
                            Bytes::from_static(b"ok")
                        };
                        let status = if request.uri().path() == "/too-early"
                            && !too_early.swap(true, Ordering::SeqCst)
                        {
                            http::StatusCode::TOO_EARLY
                        } else {
                            http::StatusCode::OK
                        };
                        let head = Response::builder()
                            .status(status)
                            .header("x-conn", number.to_string())
                            .body(())
                            .unwrap_or_default();
                        if stream.send_response(head).await.is_ok()
                            && stream.send_data(answer).await.is_ok()
                        {
                            let _ = stream.finish().await;
                        }
                    });
                }
            });
        }
    });
    stats
}
