//! What an exchange goes to and how it can fail: [`Origin`], [`ExchangeError`], and the
//! pool's own settings, [`PoolOptions`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fastfallback_net::ConnectError;
use fastfallback_pool::PoolKey;
use fastfallback_route::{Address, AddressError};

use super::Shared;

/// An origin an exchange goes to, parsed once: its address and its pool key.
///
/// ```
/// # fn demo(pool: &fastfallback_http::Pool) -> Result<(), Box<dyn std::error::Error>> {
/// let origin = pool.origin("https://example.com")?;
/// assert_eq!(origin.to_string(), "https://example.com:443");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Origin {
    /// Shared: every exchange keeps its origin, and cloning one must not allocate.
    pub(super) inner: Arc<OriginInner>,
}

pub(super) struct OriginInner {
    /// The pool the origin belongs to: leases on its connections release through it.
    pub(super) shared: Arc<Shared>,
    pub(super) address: Address,
    pub(super) key: PoolKey,
    /// `host:port`, built once: every request carries it, and cloning it shares its bytes.
    /// `None` if the host cannot be written as an authority (each request then says so).
    authority: Option<Authority>,
}

/// An origin's `host:port` as each protocol carries it (RFC 9110 §7.2).
pub(super) struct Authority {
    /// For HTTP/2's `:authority` (RFC 9113 §8.3.1), through the request's URI.
    pub(super) uri: http::uri::Authority,
    /// For HTTP/1's `host` header.
    pub(super) header: http::HeaderValue,
}

impl OriginInner {
    pub(super) fn new(shared: Arc<Shared>, address: Address, key: PoolKey) -> Self {
        let text = Bytes::from(format!("{}:{}", address.host(), address.port()));
        let authority = match (
            http::uri::Authority::from_maybe_shared(text.clone()),
            http::HeaderValue::from_maybe_shared(text),
        ) {
            (Ok(uri), Ok(header)) => Some(Authority { uri, header }),
            _ => None,
        };
        Self {
            shared,
            address,
            key,
            authority,
        }
    }
}

impl Origin {
    /// The address the race connects to.
    pub fn address(&self) -> &Address {
        &self.inner.address
    }

    /// Whether responses from this origin are read for `Alt-Svc` ([`Self::note_alt_svc`]):
    /// when the connector races QUIC, the only use of what they say.
    pub(super) fn reads_alt_svc(&self) -> bool {
        self.inner.shared.connector.policy().quic
    }

    /// Hands the `Alt-Svc` fields of a response from this origin to the connector's route
    /// memory (RFC 7838 §3; [`fastfallback_net::Connector::learn_alt_svc`]): its later
    /// connects race the HTTP/3 alternatives over QUIC. Several fields are one list (RFC 9110
    /// §5.3).
    pub(super) fn note_alt_svc(&self, headers: &http::HeaderMap) {
        let connector = &self.inner.shared.connector;
        let values: Vec<&str> = headers
            .get_all(http::header::ALT_SVC)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if !values.is_empty() {
            connector.learn_alt_svc(&self.inner.address, &values.join(", "));
        }
    }

    /// The pool key: connections are shared only between origins with equal keys (and, for
    /// HTTP/2 coalescing, under the conditions of [`Pool`](super::Pool)).
    pub fn key(&self) -> &PoolKey {
        &self.inner.key
    }

    pub(super) fn is_tls(&self) -> bool {
        self.inner.address.is_tls()
    }

    /// `host:port` as each protocol carries it; cloning a part shares its bytes.
    pub(super) fn authority(&self) -> Result<&Authority, ExchangeError> {
        self.inner
            .authority
            .as_ref()
            .ok_or_else(|| self.no_authority())
    }

    fn no_authority(&self) -> ExchangeError {
        let address = &self.inner.address;
        ExchangeError::invalid(format_args!(
            "`{}:{}` cannot be sent as an authority",
            address.host(),
            address.port()
        ))
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner.address, f)
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Origin").field(&self.to_string()).finish()
    }
}

/// Why an exchange could not be had or could not complete.
#[derive(Debug)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The origin is not a valid `http://` or `https://` address.
    InvalidOrigin(AddressError),
    /// The race to connect failed; its report is inside.
    Connect(ConnectError),
    /// The request could not be sent as given.
    InvalidRequest(String),
    /// HTTP/1 failed (handshake, request or response).
    Http1(hyper::Error),
    /// HTTP/2 failed (handshake, stream or connection).
    Http2(h2::Error),
    /// HTTP/3 failed (set-up, stream or connection), in h3's words (its error types are not
    /// stable yet, so they are not exposed).
    Http3(String),
    /// The connection closed before the exchange could start.
    Closed,
    /// No response head within [`PoolOptions::response_timeout`].
    TimedOut(Duration),
}

impl ExchangeError {
    pub(super) fn invalid(e: impl fmt::Display) -> Self {
        Self::InvalidRequest(e.to_string())
    }
}

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidOrigin(e) => write!(f, "invalid origin: {e}"),
            Self::Connect(e) => write!(f, "{e}"),
            Self::InvalidRequest(e) => write!(f, "invalid request: {e}"),
            Self::Http1(e) => {
                // hyper's own words are terse ("connection error"); what lies under them
                // (the OS error, "connection closed before message completed") says more.
                write!(f, "HTTP/1.1: {e}")?;
                let mut cause = std::error::Error::source(e);
                while let Some(c) = cause {
                    write!(f, ": {c}")?;
                    cause = c.source();
                }
                Ok(())
            }
            // h2's words, with what kind of failure it was in front.
            Self::Http2(e) if e.is_go_away() && e.is_remote() => {
                write!(f, "HTTP/2: the server sent GOAWAY: {e}")
            }
            // Our side ended the connection: h2 found the server breaking the protocol (or the
            // connection was shut down here).
            Self::Http2(e) if e.is_go_away() => {
                write!(f, "HTTP/2: the connection was closed from this side: {e}")
            }
            Self::Http2(e) if e.is_reset() && e.is_remote() => {
                write!(f, "HTTP/2: the server reset the stream: {e}")
            }
            Self::Http2(e) if e.is_io() => write!(f, "HTTP/2: the connection broke: {e}"),
            Self::Http2(e) => write!(f, "HTTP/2: {e}"),
            Self::Http3(e) => write!(f, "HTTP/3: {e}"),
            Self::Closed => f.write_str("the connection closed before the exchange started"),
            Self::TimedOut(d) => write!(
                f,
                "no response head within {} ms of sending the request",
                d.as_millis()
            ),
        }
    }
}

impl std::error::Error for ExchangeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidOrigin(e) => Some(e),
            Self::Connect(e) => Some(e),
            Self::Http1(e) => Some(e),
            Self::Http2(e) => Some(e),
            Self::InvalidRequest(_) | Self::Http3(_) | Self::Closed | Self::TimedOut(_) => None,
        }
    }
}

/// Pool settings beyond the connector's [`fastfallback_plan::PoolPolicy`] (keep-alive and the
/// idle limit come from there).
#[derive(Clone, Copy, Debug)]
pub struct PoolOptions {
    /// An HTTP/2 connection unused for this long is pinged before it is handed out again
    /// (default 10 s; OkHttp checks degraded HTTP/2 connections the same way).
    pub ping_after_idle: Duration,
    /// How long that ping may take before the connection is given up (default 1 s).
    pub ping_timeout: Duration,
    /// Speak HTTP/2 with prior knowledge on `http://` origins (RFC 9113 §3.3) instead of
    /// HTTP/1.1 (default off).
    pub prior_knowledge_h2: bool,
    /// Concurrent calls to an origin whose protocol is unknown or HTTP/2 wait for one connect
    /// instead of racing their own (default on).
    pub single_flight: bool,
    /// How many origins' protocols are remembered (default 1024).
    pub protocol_memory: usize,
    /// [`Pool::keep_warm`](super::Pool::keep_warm): the wait after a failed connect, doubled after each further
    /// failure up to [`Self::warm_backoff_max`], with ±20 % jitter (default 1 s).
    pub warm_backoff: Duration,
    /// The longest wait between warm-up attempts (default 60 s).
    pub warm_backoff_max: Duration,
    /// How long an exchange waits for the response head from the moment it starts sending
    /// the request, upload included (default `None`: no limit, as in hyper-util, Go's
    /// `http.Transport` and reqwest). Set it to bound a server that accepts and never answers
    /// or dribbles its head; leave room for the largest upload. On HTTP/1.1 the connection is
    /// then closed (its request is still in flight); on HTTP/2 only the stream is reset. The
    /// response body, once it streams, is not limited.
    pub response_timeout: Option<Duration>,
    /// Send the idempotent requests of [`Pool::send`](super::Pool::send) (RFC 9110 §9.2.2)
    /// in QUIC 0-RTT when a new connection resumes a session whose ticket allows it (RFC
    /// 9001 §4.6): the request leaves with the first flight, and its answer comes one round
    /// trip sooner (default off). Needs the `http3` feature and a connector racing QUIC.
    ///
    /// 0-RTT data can be replayed by an attacker (RFC 9001 §9.2, RFC 8470 §3), so turn it on
    /// only where an idempotent request arriving twice does no harm. A race still ends only
    /// on a completed handshake: when UDP is dropped, or the server rejects the early data,
    /// the request is sent again on the connection that won. A response to a request that
    /// went out early carries [`SentEarly`](super::SentEarly) in its extensions.
    pub early_data: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            ping_after_idle: Duration::from_secs(10),
            ping_timeout: Duration::from_secs(1),
            prior_knowledge_h2: false,
            single_flight: true,
            protocol_memory: 1024,
            warm_backoff: Duration::from_secs(1),
            warm_backoff_max: Duration::from_secs(60),
            response_timeout: None,
            early_data: false,
        }
    }
}
