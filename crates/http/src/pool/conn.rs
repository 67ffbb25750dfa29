//! The real connections the pool holds: hyper's HTTP/1 client connection or an h2 client
//! connection, each driven by its own task, plus what coalescing and health checks need.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;
use fastfallback_pool::PROVISIONAL_MAX_STREAMS;
use fastfallback_proto::{PooledId, Protocol};
use futures::FutureExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;
use tokio::task::AbortHandle;

use super::{ExchangeError, Shared};
use fastfallback_net::Stream;
#[cfg(feature = "http3")]
use fastfallback_net::quinn;

/// The request body type of HTTP/1 connections.
pub(crate) type H1Body = UnsyncBoxBody<Bytes, BoxError>;

/// The error type request bodies are boxed into.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The sender of an HTTP/1 connection.
pub(crate) type H1Sender = http1::SendRequest<H1Body>;

/// What a connection's driving task shares with the pool: whether it ended, and under which
/// id the pool knows the connection (set once it is pooled).
#[derive(Debug, Default)]
pub(crate) struct Health {
    closed: AtomicBool,
    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS plus one, once known (0: not yet).
    max_streams: AtomicU32,
    id: OnceLock<PooledId>,
}

impl Health {
    /// Whether the connection's task ended (the peer closed it, an error, or a GOAWAY whose
    /// streams have finished).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Records the pool's id for the connection. Called under the pool's lock, as are the
    /// reads in [`Shared::connection_ended`] and [`Shared::settings_known`], so an event that
    /// races the insertion is never lost.
    pub(crate) fn set_id(&self, id: PooledId) {
        let _ = self.id.set(id);
    }

    /// The pool's id for the connection, once pooled.
    pub(crate) fn id(&self) -> Option<PooledId> {
        self.id.get().copied()
    }

    /// The peer's stream limit, once its SETTINGS arrived.
    pub(crate) fn max_streams(&self) -> Option<u32> {
        match self.max_streams.load(Ordering::Acquire) {
            0 => None,
            n => Some(n - 1),
        }
    }

    /// Called by the task when the connection ends: marks it, and tells the pool so it takes
    /// no new exchange (and is closed once idle).
    fn ended(self: &Arc<Self>, pool: &Weak<Shared>) {
        self.closed.store(true, Ordering::Release);
        if let Some(shared) = pool.upgrade() {
            shared.connection_ended(self);
        }
    }
}

/// The protocol side of a pooled connection.
pub(crate) enum Proto {
    /// HTTP/1.1: the sender is taken out while an exchange runs on it, and put back when the
    /// exchange ended cleanly.
    Http1(Option<http1::SendRequest<H1Body>>),
    /// HTTP/2: every exchange clones the sender (one stream each).
    Http2 {
        send: h2::client::SendRequest<Bytes>,
        /// Used once to learn the peer's SETTINGS, then for idle health pings; a per-connection
        /// lock, never held with the pool's.
        ping: Arc<tokio::sync::Mutex<Option<h2::PingPong>>>,
    },
    /// HTTP/3 over a QUIC winner: every exchange clones the sender (one request stream each).
    #[cfg(feature = "http3")]
    Http3(H3Sender),
}

/// The sender of an HTTP/3 connection.
#[cfg(feature = "http3")]
pub(crate) type H3Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// One connection the pool holds. Dropping it stops its task, which closes the socket.
pub(crate) struct Conn {
    pub(crate) proto: Proto,
    pub(crate) peer: SocketAddr,
    /// The server's certificate chain (leaf first), for coalescing checks; `None` on
    /// cleartext.
    pub(crate) certs: Option<Arc<[CertificateDer<'static>]>>,
    pub(crate) health: Arc<Health>,
    task: AbortHandle,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Conn {
    /// The protocol this connection speaks.
    pub(crate) fn protocol(&self) -> Protocol {
        match self.proto {
            Proto::Http1(_) => Protocol::Http11,
            Proto::Http2 { .. } => Protocol::Http2,
            #[cfg(feature = "http3")]
            Proto::Http3(_) => Protocol::Http3,
        }
    }

    /// Runs the HTTP handshake of `protocol` over a connected stream and starts the task that
    /// drives the connection. For HTTP/2 it also starts learning the peer's stream limit (the
    /// SETTINGS frame precedes the answer to our first PING, RFC 9113 §6.5 and §6.7); until
    /// then it opens at most `streams` at once (the limit an earlier connection to the same
    /// server learned), or [`PROVISIONAL_MAX_STREAMS`].
    ///
    /// Server push is refused (SETTINGS_ENABLE_PUSH = 0, RFC 9113 §6.5.2): the pool has no use
    /// for pushed responses, and each one the server may push costs memory until the
    /// connection closes.
    pub(crate) async fn handshake(
        stream: Stream,
        peer: SocketAddr,
        protocol: Protocol,
        streams: Option<u32>,
        pool: Weak<Shared>,
    ) -> Result<Self, ExchangeError> {
        let certs = stream
            .tls()
            .and_then(|t| t.peer_certificates())
            .map(|c| Arc::<[CertificateDer<'static>]>::from(c.to_vec()))
            .or_else(|| quic_certificates(&stream));
        let health = Arc::new(Health::default());
        let (proto, task) = match protocol {
            Protocol::Http11 => {
                let (send, conn) = http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(ExchangeError::Http1)?;
                let h = Arc::clone(&health);
                // `map`, not an async block: a block would hold the connection twice (the
                // captured value and the awaited one), doubling the task.
                let task = tokio::spawn(conn.map(move |_| h.ended(&pool)));
                (Proto::Http1(Some(send)), task.abort_handle())
            }
            Protocol::Http2 => {
                // Until the peer's SETTINGS arrive, open no more streams than the pool hands out.
                let initial = streams.unwrap_or(PROVISIONAL_MAX_STREAMS);
                let (send, mut conn) = h2::client::Builder::new()
                    .initial_max_send_streams(initial as usize)
                    .enable_push(false)
                    .handshake::<_, Bytes>(stream)
                    .await
                    .map_err(ExchangeError::Http2)?;
                let ping = Arc::new(tokio::sync::Mutex::new(conn.ping_pong()));
                // Held until the SETTINGS are known, so a health ping waits behind it.
                let settings_guard = Arc::clone(&ping).try_lock_owned().ok();
                let h = Arc::clone(&health);
                let weak = pool.clone();
                let task = tokio::spawn(conn.map(move |_| h.ended(&weak)));
                let limits = send.clone();
                let h = Arc::clone(&health);
                tokio::spawn(async move {
                    let Some(mut guard) = settings_guard else {
                        return;
                    };
                    let Some(pp) = guard.as_mut() else {
                        return;
                    };
                    if pp.ping(h2::Ping::opaque()).await.is_ok() {
                        let max = u32::try_from(limits.current_max_send_streams())
                            .unwrap_or(u32::MAX - 1)
                            .min(u32::MAX - 1);
                        h.max_streams.store(max + 1, Ordering::Release);
                        if let Some(shared) = pool.upgrade() {
                            shared.settings_known(&h);
                        }
                    }
                });
                (Proto::Http2 { send, ping }, task.abort_handle())
            }
            Protocol::Http3 => Self::h3_handshake(stream, &health, pool).await?,
        };
        Ok(Self {
            proto,
            peer,
            certs,
            health,
            task,
        })
    }
}

impl Conn {
    /// HTTP/3's set-up over a QUIC winner (RFC 9114 §3.2: the control streams and SETTINGS
    /// go out at once, no round trip waited for). The task drives the connection (its control
    /// streams and GOAWAY) until it closes, and holds the QUIC endpoint while it runs. The
    /// stream limit is QUIC's own (the peer's `initial_max_streams_bidi`): quinn makes a
    /// request wait for stream credit rather than fail, so the pool hands out
    /// [`PROVISIONAL_MAX_STREAMS`] until told otherwise.
    #[cfg(feature = "http3")]
    async fn h3_handshake(
        stream: Stream,
        health: &Arc<Health>,
        pool: Weak<Shared>,
    ) -> Result<(Proto, AbortHandle), ExchangeError> {
        let Stream::Quic(quic) = stream else {
            return Err(not_quic());
        };
        let (conn, endpoint) = quic.into_parts();
        let (driver, send) = h3::client::builder()
            .send_grease(false)
            .build::<_, _, Bytes>(h3_quinn::Connection::new(conn))
            .await
            .map_err(|e| ExchangeError::Http3(e.to_string()))?;
        Ok(Self::drive_h3(driver, send, endpoint, health, pool))
    }

    /// Starts the task that drives an HTTP/3 connection (its control streams and GOAWAY)
    /// until it closes, holding the QUIC endpoint while it runs.
    #[cfg(feature = "http3")]
    fn drive_h3(
        mut driver: super::early::H3Driver,
        send: H3Sender,
        endpoint: quinn::Endpoint,
        health: &Arc<Health>,
        pool: Weak<Shared>,
    ) -> (Proto, AbortHandle) {
        let h = Arc::clone(health);
        let task = tokio::spawn(async move {
            let _endpoint = endpoint;
            let _closed = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            h.ended(&pool);
        });
        (Proto::Http3(send), task.abort_handle())
    }

    /// A connection over a QUIC winner whose HTTP/3 client was made in 0-RTT, before the
    /// race ended (`pool/early.rs`): that client is the connection's (its control stream is
    /// already out, RFC 9114 §6.2.1).
    #[cfg(feature = "http3")]
    pub(crate) fn adopt_h3(
        stream: Stream,
        peer: SocketAddr,
        driver: super::early::H3Driver,
        send: H3Sender,
        pool: Weak<Shared>,
    ) -> Result<Self, ExchangeError> {
        let certs = quic_certificates(&stream);
        let Stream::Quic(quic) = stream else {
            return Err(not_quic());
        };
        let health = Arc::new(Health::default());
        let (_, endpoint) = quic.into_parts();
        let (proto, task) = Self::drive_h3(driver, send, endpoint, &health, pool);
        Ok(Self {
            proto,
            peer,
            certs,
            health,
            task,
        })
    }

    #[cfg(not(feature = "http3"))]
    async fn h3_handshake(
        _stream: Stream,
        _health: &Arc<Health>,
        _pool: Weak<Shared>,
    ) -> Result<(Proto, AbortHandle), ExchangeError> {
        Err(ExchangeError::Connect(
            fastfallback_net::ConnectError::Unsupported(
                "HTTP/3: build fastfallback-http with its `http3` feature",
            ),
        ))
    }
}

/// HTTP/3 asked of a byte stream.
#[cfg(feature = "http3")]
fn not_quic() -> ExchangeError {
    ExchangeError::Http3("HTTP/3 needs a QUIC connection; the race gave a byte stream".into())
}

/// The server's certificate chain of a QUIC winner (quinn's rustls session gives it as a
/// `Vec<CertificateDer>`), for the same coalescing checks as TLS over TCP.
#[cfg(feature = "http3")]
fn quic_certificates(stream: &Stream) -> Option<Arc<[CertificateDer<'static>]>> {
    let identity = stream.quic()?.connection().peer_identity()?;
    let chain = identity.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    Some(Arc::from(*chain))
}

#[cfg(not(feature = "http3"))]
fn quic_certificates(_stream: &Stream) -> Option<Arc<[CertificateDer<'static>]>> {
    None
}
