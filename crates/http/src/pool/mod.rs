//! [`Pool`]: connection reuse wired into the race.
//!
//! An HTTP client asks the pool for an [`Exchange`] to an [`Origin`]. The pool hands out a
//! pooled connection when one can carry the exchange, else it runs a race. While the race runs
//! the pool may end it: when a usable connection for the same key (or an HTTP/2 connection
//! that may be coalesced) enters the pool, the pool reserves a stream on it and sends it to the
//! race, which ends on it in the same turn (`handle_pooled`) and cancels its attempts. Nothing
//! polls: the offer is an event.
//!
//! # Single flight
//!
//! While an origin's protocol is unknown (nothing pooled, nothing remembered) or known to be
//! HTTP/2, concurrent calls do not race their own connects: the first leads, the others start
//! their race in [`fastfallback_plan::RacePhase::Waiting`]. When the leader's connection is
//! HTTP/2 they are all offered a stream on it. Otherwise (HTTP/1, or the leader failed) they
//! are released with what the leader's race taught route memory, and race at once, starting
//! with the route that just won.
//!
//! # Locking rules
//!
//! - All pool state ([`fastfallback_pool::ConnectionPool`], the flights, the protocol memory and
//!   the races watching for connections) sits under one `std::sync::Mutex`, held only for
//!   bookkeeping: never across an `.await`, never while verifying a certificate, never while
//!   dropping a connection (connections, channels and leases taken out under the lock are
//!   dropped after it is released, see `Locked`).
//! - Per-connection state stays with the connection: each connection's task owns its socket;
//!   an HTTP/2 connection's PING handle has its own async lock, taken only outside the pool
//!   lock.
//! - A connection's task tells the pool when it ends or learns the peer's stream limit by
//!   taking the pool lock briefly; it never holds another lock then.

mod conn;
mod exchange;
mod service;

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use fastfallback_pool::{ConnectionPool, Flights, Join, PoolConfig, PoolKey, ProtocolMemory};
use fastfallback_proto::{Alpn, PooledId, Protocol};
use fastfallback_route::{Address, AddressError, Host, Lesson, Scheme};
use rustls::pki_types::{ServerName, UnixTime};
use tokio::sync::mpsc;
use tracing::Instrument;

use conn::{Conn, H1Sender, Health, Proto};
pub use exchange::{Body, Exchange};
use exchange::{Held, Lease, Parts};
use fastfallback_net::link::{Listeners, Offer, RaceLink, Raced, Spare, Watch, now};
use fastfallback_net::{
    CallEvent, ConnectError, ConnectionEvent, ConnectionListener, Connector, EventListener, Source,
};
pub use service::RequestBody;

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
    inner: Arc<OriginInner>,
}

struct OriginInner {
    /// The pool the origin belongs to: leases on its connections release through it.
    shared: Arc<Shared>,
    address: Address,
    key: PoolKey,
}

impl Origin {
    /// The address the race connects to.
    pub fn address(&self) -> &Address {
        &self.inner.address
    }

    /// The pool key: connections are shared only between origins with equal keys (and, for
    /// HTTP/2 coalescing, under the conditions of [`Pool`]).
    pub fn key(&self) -> &PoolKey {
        &self.inner.key
    }

    fn is_tls(&self) -> bool {
        self.inner.address.is_tls()
    }

    /// `host:port` as the `host` header and `:authority` carry it.
    fn authority(&self) -> String {
        format!(
            "{}:{}",
            self.inner.address.host(),
            self.inner.address.port()
        )
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
    /// The connection closed before the exchange could start.
    Closed,
    /// No response head within [`PoolOptions::response_timeout`].
    TimedOut(Duration),
}

impl ExchangeError {
    fn invalid(e: impl fmt::Display) -> Self {
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
            Self::InvalidRequest(_) | Self::Closed | Self::TimedOut(_) => None,
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
    /// [`Pool::keep_warm`]: the wait after a failed connect, doubled after each further
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
        }
    }
}

/// What the pool holds right now.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct PoolStats {
    /// Connections in the pool, in use or idle.
    pub connections: usize,
    /// Idle connections that may be handed out.
    pub idle: usize,
    /// Races in progress that the pool may end with a pooled connection.
    pub watching: usize,
    /// Origins whose first connect is in flight, with calls waiting on it.
    pub flights: usize,
}

/// Connection reuse over a [`Connector`]: HTTP/1.1 and HTTP/2, single flight for new origins,
/// races ended by connections that enter the pool mid-race, HTTP/2 coalescing, and an idle
/// monitor that closes expired connections without waiting for a call.
///
/// Cheap to clone; clones share the connections.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use fastfallback_http::Pool;
/// use fastfallback_net::Connector;
///
/// let pool = Pool::new(Connector::builder().build()?);
/// let origin = pool.origin("https://example.com")?;
/// let exchange = pool.exchange(&origin).await?;
/// println!("{:?} over {:?}", exchange.source(), exchange.protocol());
/// let response = exchange.send(http::Request::get("/").body(bytes::Bytes::new())?).await?;
/// let body = response.into_body().bytes().await?;
/// println!("{} bytes", body.len());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("stats", &self.stats())
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Shared {
    connector: Connector,
    options: PoolOptions,
    /// Told every [`ConnectionEvent`] of the pool.
    listener: Option<Arc<dyn ConnectionListener>>,
    state: Mutex<State>,
    monitor: Arc<tokio::sync::Notify>,
    /// Wakes the warmers when a connection closes.
    warm: Arc<tokio::sync::Notify>,
    races: AtomicU64,
}

struct State {
    pool: ConnectionPool<Conn>,
    flights: Flights<u64>,
    protocols: ProtocolMemory,
    watchers: Vec<Watcher>,
    monitor_running: bool,
    /// The latest clock reading of any pool operation: checkouts use it instead of reading
    /// the clock (see [`Shared::checkout`]).
    clock: fastfallback_proto::Instant,
    /// The tasks keeping origins warm ([`Pool::keep_warm`]), by key.
    warmers: std::collections::HashMap<
        PoolKey,
        tokio::task::AbortHandle,
        fastfallback_proto::FxBuildHasher,
    >,
}

/// A race in progress that the pool may end with a pooled connection.
struct Watcher {
    race: u64,
    /// The origin the race connects to (its key decides which connections it is offered).
    origin: Origin,
    offers: mpsc::UnboundedSender<Offer>,
    /// What the race's DNS answers said so far (A and AAAA), for coalescing.
    resolved: Vec<IpAddr>,
    /// The race waits ([`fastfallback_plan::RacePhase::Waiting`]) for another call's connect
    /// or for a free stream; it starts connecting only when released.
    waiting: bool,
}

/// What must be dropped only after the pool lock is released.
enum Trash {
    Conn(#[allow(dead_code)] Conn),
    Watcher(#[allow(dead_code)] Watcher),
    Offer(#[allow(dead_code)] Offer),
}

/// The pool lock, with a place for what must be dropped after it (dropping a connection or a
/// lease under the lock would run code that takes it again).
struct Locked<'a> {
    state: Option<MutexGuard<'a, State>>,
    trash: Vec<Trash>,
    /// Connection events, told to the listener once the lock is released.
    events: Vec<ConnectionEvent>,
    listener: Option<&'a Arc<dyn ConnectionListener>>,
    /// Told when a connection closes (the warmers replace it).
    warm: &'a tokio::sync::Notify,
    closed_any: bool,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let warmers = self.closed_any && self.state.as_ref().is_some_and(|s| !s.warmers.is_empty());
        self.state = None;
        if warmers {
            self.warm.notify_waiters();
        }
        if let Some(listener) = self.listener {
            for event in self.events.drain(..) {
                listener.event(&event);
            }
        }
        // `trash` is dropped after this, with the lock released.
    }
}

impl Locked<'_> {
    /// Takes a connection that left the pool to be closed after the lock.
    fn close(&mut self, conn: Conn) {
        self.closed_any = true;
        if let Some(id) = conn.health.id() {
            self.event(|| ConnectionEvent::Closed { connection: id.0 });
        }
        self.trash.push(Trash::Conn(conn));
    }

    /// Records a connection event for the listener, if there is one.
    fn event(&mut self, event: impl FnOnce() -> ConnectionEvent) {
        if self.listener.is_some() {
            self.events.push(event());
        }
    }

    /// Marks `id` as taking no new exchanges; the listener hears it the first time.
    fn retire(&mut self, id: PooledId) {
        if self.pool.takes_new_exchanges(id) == Some(true) {
            self.pool.mark_no_new_exchanges(id);
            self.event(|| ConnectionEvent::NoNewExchanges { connection: id.0 });
        }
    }
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.state.as_ref().expect("held until drop")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.state.as_mut().expect("held until drop")
    }
}

impl Pool {
    /// A pool over `connector`, with the connector policy's keep-alive and idle limit and
    /// default [`PoolOptions`].
    pub fn new(connector: Connector) -> Self {
        Self::with_options(connector, PoolOptions::default())
    }

    /// A pool over `connector` with `options`.
    pub fn with_options(connector: Connector, options: PoolOptions) -> Self {
        Self::build(connector, options, None)
    }

    /// A pool over `connector` with `options`, telling `listener` what happens to its
    /// connections.
    pub fn with_listener(
        connector: Connector,
        options: PoolOptions,
        listener: impl ConnectionListener,
    ) -> Self {
        Self::build(connector, options, Some(Arc::new(listener)))
    }

    fn build(
        connector: Connector,
        options: PoolOptions,
        listener: Option<Arc<dyn ConnectionListener>>,
    ) -> Self {
        let policy = connector.policy().pool;
        let config = PoolConfig {
            keep_alive: policy.keep_alive,
            max_idle: policy.max_idle,
        };
        Self {
            shared: Arc::new(Shared {
                connector,
                options,
                listener,
                state: Mutex::new(State {
                    pool: ConnectionPool::new(config),
                    flights: Flights::default(),
                    protocols: ProtocolMemory::new(options.protocol_memory),
                    watchers: Vec::new(),
                    monitor_running: false,
                    clock: now(),
                    warmers: Default::default(),
                }),
                monitor: Arc::new(tokio::sync::Notify::new()),
                warm: Arc::new(tokio::sync::Notify::new()),
                races: AtomicU64::new(0),
            }),
        }
    }

    /// The connector races run on.
    pub fn connector(&self) -> &Connector {
        &self.shared.connector
    }

    /// Parses an `http://` or `https://` origin (a path, if any, is ignored) and computes its
    /// pool key.
    pub fn origin(&self, url: &str) -> Result<Origin, ExchangeError> {
        let address = Address::parse(url).map_err(ExchangeError::InvalidOrigin)?;
        if address.scheme() == Scheme::Tcp {
            // The address as parsed, not the URL as given: that may hold a password.
            return Err(ExchangeError::InvalidRequest(format!(
                "{:?} is not an http:// or https:// origin",
                address.to_string()
            )));
        }
        Ok(self.origin_of(address))
    }

    /// The origin of an (HTTP) address, keyed by what this pool's connector will make of it:
    /// its TLS configuration and its proxies.
    fn origin_of(&self, address: Address) -> Origin {
        let host = match address.host() {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        };
        let mut key = PoolKey::new(host, address.port(), address.is_tls())
            .with_tls_config(self.shared.connector.tls_identity());
        // Connections through proxies are keyed by them (never by their credentials, only a
        // fingerprint), so they are never shared with direct ones, nor coalesced.
        let proxies = self.shared.connector.proxies();
        if let Some(proxy) = address.proxy() {
            key = key.with_proxy(proxy.pool_identity());
        } else if !proxies.is_empty() {
            let ids: Vec<String> = proxies.iter().map(|p| p.pool_identity()).collect();
            key = key.with_proxy(ids.join(" | "));
        }
        Origin {
            inner: Arc::new(OriginInner {
                shared: Arc::clone(&self.shared),
                address,
                key,
            }),
        }
    }

    /// A connection that can carry one exchange to `origin`: a pooled one, or the race's new
    /// one (which is pooled for the next calls).
    ///
    /// When a pooled connection is ready, the first poll returns it without allocating;
    /// otherwise the rest of the work (health checks, the race) runs in a boxed future.
    pub fn exchange<'a>(&'a self, origin: &'a Origin) -> ExchangeFuture<'a> {
        self.exchange_with(origin, Call::default())
    }

    /// [`Self::exchange`] with per-call settings: an exclusive connection, an
    /// [`EventListener`] for the call's events. (Not `call`: that name is
    /// `tower_service::Service::call`'s, which `Pool` implements.)
    pub fn exchange_with<'a>(&'a self, origin: &'a Origin, call: Call) -> ExchangeFuture<'a> {
        let plain = call.listener.is_none() && !call.exclusive;
        let state = if plain && Arc::ptr_eq(&origin.inner.shared, &self.shared) {
            FutureState::Start(origin)
        } else {
            // An origin made by another pool is rebound to this one.
            let origin = self.rebind(origin);
            FutureState::Slow(Box::pin(async move {
                origin.inner.shared.exchange(&origin, &call).await
            }))
        };
        ExchangeFuture { state }
    }

    /// `origin` as this pool's own. An origin made by another pool is keyed again by this
    /// one: the key must describe the connection this pool's connector makes (its proxies,
    /// its TLS configuration), not the other pool's.
    fn rebind(&self, origin: &Origin) -> Origin {
        if Arc::ptr_eq(&origin.inner.shared, &self.shared) {
            return origin.clone();
        }
        self.origin_of(origin.inner.address.clone())
    }

    /// A connection of its own for one exchange to `origin`: never taken from the pool and
    /// never put in it; closed when the exchange ends.
    pub async fn exchange_exclusive(&self, origin: &Origin) -> Result<Exchange, ExchangeError> {
        self.exchange_with(origin, Call::default().exclusive())
            .await
    }

    /// Sends `request` to the origin of its (absolute) URI on a pooled or new connection.
    ///
    /// A pooled connection can close just as it is reused (the server's keep-alive ran out
    /// while the request was on its way). When that happens to an idempotent request (GET,
    /// HEAD, PUT, DELETE, OPTIONS, TRACE: RFC 9110 §9.2.2 allows retrying them), before any
    /// response arrived, it is sent once more, on another connection. Other requests get the
    /// error: they may have been processed.
    pub async fn send(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<Body>, ExchangeError> {
        let origin = self.origin(&request.uri().to_string())?;
        let exchange = self.exchange(&origin).await?;
        let replay = (exchange.is_reused() && request.method().is_idempotent()).then(|| {
            let mut again = http::Request::new(request.body().clone());
            *again.method_mut() = request.method().clone();
            *again.uri_mut() = request.uri().clone();
            *again.version_mut() = request.version();
            *again.headers_mut() = request.headers().clone();
            again
        });
        match (exchange.send(request).await, replay) {
            (Err(ExchangeError::Http1(e)), Some(again)) => {
                tracing::debug!(error = %e, "a reused HTTP/1.1 connection failed; sending again");
                self.exchange(&origin).await?.send(again).await
            }
            (result, _) => result,
        }
    }

    /// [`Self::send`] with any request body, streamed (see [`Exchange::send_body`]).
    pub async fn send_body<B>(
        &self,
        request: http::Request<B>,
    ) -> Result<http::Response<Body>, ExchangeError>
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<conn::BoxError>,
    {
        let origin = self.origin(&request.uri().to_string())?;
        self.exchange(&origin).await?.send_body(request).await
    }

    /// Keeps enough connections to `origin` open, ahead of demand, to carry
    /// `min_concurrent_calls` exchanges at once (on HTTP/2, streams count), as OkHttp's
    /// `AddressPolicy` did and MinIO's grid manager does. A task opens them, replaces those
    /// that break or idle out, and after a failed connect waits
    /// [`PoolOptions::warm_backoff`], doubling up to [`PoolOptions::warm_backoff_max`], with
    /// ±20 % jitter. Calling it again replaces the setting; 0 stops it. Needs a tokio runtime
    /// (without one this does nothing).
    ///
    /// Warm connections are ordinary pooled connections: they count toward the idle limit,
    /// so keep `min_concurrent_calls` within [`fastfallback_plan::PoolPolicy::max_idle`] on
    /// HTTP/1.
    pub fn keep_warm(&self, origin: &Origin, min_concurrent_calls: usize) {
        let origin = self.rebind(origin);
        let key = origin.inner.key.clone();
        let mut st = self.shared.lock();
        if let Some(old) = st.warmers.remove(&key) {
            old.abort();
        }
        if min_concurrent_calls == 0 || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let warmer = Warmer {
            pool: Arc::downgrade(&self.shared),
            address: origin.inner.address.clone(),
            key: key.clone(),
            min: min_concurrent_calls as u64,
            wake: Arc::clone(&self.shared.warm),
        };
        drop(origin);
        let task = tokio::spawn(warmer.run());
        st.warmers.insert(key, task.abort_handle());
    }

    /// Closes every idle connection now (OkHttp's `evictAll`). Connections carrying exchanges
    /// finish them and stay.
    pub fn evict_all(&self) {
        let mut st = self.shared.lock();
        let closed = st.pool.evict_idle();
        for c in closed {
            st.close(c);
        }
    }

    /// What the pool holds right now.
    pub fn stats(&self) -> PoolStats {
        let st = self.shared.lock();
        PoolStats {
            connections: st.pool.len(),
            idle: st.pool.idle_count(),
            watching: st.watchers.len(),
            flights: st.flights.len(),
        }
    }
}

/// Per-call settings for [`Pool::exchange_with`].
///
/// ```
/// use fastfallback_http::Call;
/// use fastfallback_net::{CallEvent, EventListener};
///
/// struct Print;
/// impl EventListener for Print {
///     fn event(&self, event: &CallEvent) {
///         println!("{event:?}");
///     }
/// }
/// let call = Call::default().listener(Print).exclusive();
/// # let _ = call;
/// ```
#[derive(Clone, Default)]
pub struct Call {
    exclusive: bool,
    listener: Option<Arc<dyn EventListener>>,
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("exclusive", &self.exclusive)
            .field("listener", &self.listener.is_some())
            .finish()
    }
}

/// The settings of [`Pool::exchange`].
const PLAIN: Call = Call {
    exclusive: false,
    listener: None,
};

impl Call {
    /// A connection of the call's own: never taken from the pool and never put in it (like
    /// jcifs's exclusive transport); closed when the exchange ends.
    #[must_use]
    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }

    /// Tells `listener` every [`CallEvent`] of the call.
    #[must_use]
    pub fn listener(mut self, listener: impl EventListener) -> Self {
        self.listener = Some(Arc::new(listener));
        self
    }

    fn listeners(&self, shared: &Shared) -> Listeners {
        Listeners {
            call: self.listener.clone(),
            connection: shared.listener.clone(),
        }
    }
}

/// The future of [`Pool::exchange`].
#[must_use = "futures do nothing unless polled"]
pub struct ExchangeFuture<'a> {
    state: FutureState<'a>,
}

type SlowExchange<'a> = Pin<Box<dyn Future<Output = Result<Exchange, ExchangeError>> + Send + 'a>>;

enum FutureState<'a> {
    Start(&'a Origin),
    Slow(SlowExchange<'a>),
    Done,
}

impl fmt::Debug for ExchangeFuture<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangeFuture").finish_non_exhaustive()
    }
}

impl Future for ExchangeFuture<'_> {
    type Output = Result<Exchange, ExchangeError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match std::mem::replace(&mut self.state, FutureState::Done) {
                FutureState::Start(origin) => {
                    let _span = tracing::debug_span!("call", origin = %origin).entered();
                    let shared = &origin.inner.shared;
                    if let Some(ready) = shared.checkout_ready(origin) {
                        return Poll::Ready(Ok(ready));
                    }
                    self.state = FutureState::Slow(Box::pin(shared.exchange(origin, &PLAIN)));
                }
                FutureState::Slow(mut fut) => {
                    let poll = fut.as_mut().poll(cx);
                    if poll.is_pending() {
                        self.state = FutureState::Slow(fut);
                    }
                    return poll;
                }
                FutureState::Done => return Poll::Ready(Err(ExchangeError::Closed)),
            }
        }
    }
}

/// Takes what one exchange on `conn` needs (the HTTP/1 sender, or a clone of the HTTP/2 one),
/// and the PING handle when the connection sat idle long enough to be checked (`stale`).
/// `None` if the connection is dead.
fn take_from(conn: &mut Conn, stale: bool) -> Option<(Held, Parts, Option<PingHandle>)> {
    if conn.health.is_closed() {
        return None;
    }
    let parts = Parts {
        protocol: conn.protocol(),
        peer: conn.peer,
    };
    match &mut conn.proto {
        Proto::Http1(slot) => {
            let sender = slot.take().filter(|s| !s.is_closed())?;
            Some((Held::Http1(sender), parts, None))
        }
        Proto::Http2 { send, ping } => Some((
            Held::Http2(send.clone()),
            parts,
            stale.then(|| Arc::clone(ping)),
        )),
    }
}

/// An HTTP/2 connection's PING handle, behind its own lock.
type PingHandle = Arc<tokio::sync::Mutex<Option<h2::PingPong>>>;

/// A pooled connection checked out under the lock, still to be health-checked outside it.
struct Checkout {
    lease: Lease,
    parts: Parts,
    /// An HTTP/2 connection to ping first, having sat unused this long.
    ping: Option<PingHandle>,
}

/// How many times a call looks again after its race ended on an offered connection that
/// closed before the call could take it.
const STALE_OFFERS: u32 = 3;

/// A call's registration to run a race.
struct Registration {
    race: u64,
    offers: Option<mpsc::UnboundedReceiver<Offer>>,
    waiting: bool,
}

impl Shared {
    fn lock(&self) -> Locked<'_> {
        Locked {
            state: Some(self.state.lock().unwrap_or_else(|p| p.into_inner())),
            trash: Vec::new(),
            events: Vec::new(),
            listener: self.listener.as_ref(),
            warm: &self.warm,
            closed_any: false,
        }
    }

    /// The fast path: a pooled connection that needs no I/O to check (an HTTP/1 sender that is
    /// ready, an HTTP/2 connection used recently). `None` sends the call down the slow path.
    fn checkout_ready(self: &Arc<Self>, origin: &Origin) -> Option<Exchange> {
        let mut st = self.lock();
        let c = self.checkout(&mut st, origin)?;
        let mut c = c;
        let sync = c.ping.is_none() && c.lease.h1_mut().is_none_or(|h1| h1.is_ready());
        drop(st);
        if !sync {
            // Given back (after the lock), and taken again by the slow path.
            drop(c);
            return None;
        }
        Exchange::pooled(c.lease, c.parts, Source::Pool, None, None).ok()
    }

    /// One call: its events around [`Self::acquire`].
    async fn exchange(
        self: &Arc<Self>,
        origin: &Origin,
        call: &Call,
    ) -> Result<Exchange, ExchangeError> {
        let events = call.listeners(self);
        events.call(|| CallEvent::CallStart {
            origin: origin.to_string(),
        });
        let span = tracing::debug_span!("call", origin = %origin);
        let result = self.acquire(origin, call).instrument(span).await;
        if let Err(e) = &result {
            events.call(|| CallEvent::CallFailed {
                error: e.to_string(),
            });
        }
        result
    }

    async fn acquire(
        self: &Arc<Self>,
        origin: &Origin,
        call: &Call,
    ) -> Result<Exchange, ExchangeError> {
        if call.exclusive {
            let registration = self.register(&mut self.lock(), origin, true);
            return Box::pin(self.connect(origin, registration, call)).await;
        }
        let mut stale_offers = 0;
        loop {
            let found = {
                let mut st = self.lock();
                match self.checkout(&mut st, origin) {
                    Some(c) => Ok(c),
                    None => Err(self.register(&mut st, origin, false)),
                }
            };
            match found {
                Ok(checkout) => {
                    if let Some(ex) = self.verify(checkout, Source::Pool, call).await {
                        return Ok(ex);
                    }
                }
                // Boxed: the race is large, and a checkout that finds a pooled connection
                // should not carry (and move) its state.
                Err(registration) => {
                    match Box::pin(self.connect(origin, registration, call)).await {
                        Err(ExchangeError::Closed) if stale_offers < STALE_OFFERS => {
                            // The race ended on an offered connection that closed before the
                            // call could take it (a GOAWAY, a reset): look again.
                            stale_offers += 1;
                        }
                        done => return done,
                    }
                }
            }
        }
    }

    /// Takes a usable pooled connection for `key`, if there is one; connections found dead
    /// on the way are closed.
    ///
    /// No clock is read for HTTP/1: the keep-alive check uses the pool's latest reading, and
    /// the idle monitor (always running while connections exist, since their tasks need a
    /// runtime) closes expired connections on time. An HTTP/2 connection that was idle reads
    /// the clock, to decide on a health ping.
    fn checkout(&self, st: &mut Locked<'_>, origin: &Origin) -> Option<Checkout> {
        let key = &origin.inner.key;
        let ping_after = self.options.ping_after_idle;
        loop {
            let t = st.clock;
            let a = st.pool.acquire_entry(key, t)?;
            let id = a.id;
            let was_idle = a.allocations == 1 && a.idle_since.is_some();
            let since = a.idle_since;
            let multiplexed = matches!(a.conn.proto, Proto::Http2 { .. });
            let stale =
                multiplexed && was_idle && since.is_some_and(|since| now() - since >= ping_after);
            match take_from(a.conn, stale) {
                Some((held, parts, ping)) => {
                    let mut lease = Lease::new(origin.clone(), id);
                    lease.hold(held);
                    return Some(Checkout { lease, parts, ping });
                }
                None => {
                    if let Some(c) = st.pool.remove(id) {
                        st.close(c);
                    }
                }
            }
        }
    }

    /// What an exchange under `lease` (already counted) needs; `None` if the connection turned
    /// out dead (it is then closed, and the lease dropped after the lock).
    fn take_parts(&self, st: &mut Locked<'_>, mut lease: Lease) -> Option<Checkout> {
        let id = lease.id();
        match st.pool.get_mut(id).and_then(|conn| take_from(conn, false)) {
            Some((held, parts, ping)) => {
                lease.hold(held);
                Some(Checkout { lease, parts, ping })
            }
            None => {
                if let Some(c) = st.pool.remove(id) {
                    st.close(c);
                }
                st.trash.push(Trash::Offer(Offer::Pooled(lease.offered())));
                None
            }
        }
    }

    /// Health checks that need I/O, outside the lock: an HTTP/1 sender must be ready, an HTTP/2
    /// connection idle past the threshold must answer a PING. Returns the exchange, or `None`
    /// after closing a connection that failed.
    async fn verify(
        self: &Arc<Self>,
        mut c: Checkout,
        source: Source,
        call: &Call,
    ) -> Option<Exchange> {
        if let Some(h1) = c.lease.h1_mut()
            && !h1.is_ready()
            && h1.ready().await.is_err()
        {
            self.no_new_exchanges(c.lease.id());
            c.lease.spoil();
            drop(c.lease);
            return None;
        }
        if let Some(ping) = c.ping.take() {
            let answered = tokio::time::timeout(self.options.ping_timeout, async {
                let mut pp = ping.lock().await;
                match pp.as_mut() {
                    Some(pp) => pp.ping(h2::Ping::opaque()).await.is_ok(),
                    None => false,
                }
            })
            .await
            .unwrap_or(false);
            if !answered {
                self.no_new_exchanges(c.lease.id());
                drop(c.lease);
                return None;
            }
        }
        Exchange::pooled(c.lease, c.parts, source, None, call.listener.clone()).ok()
    }

    /// Registers a call that must race: single flight (lead or follow) and watching for
    /// connections that enter the pool.
    fn register(&self, st: &mut Locked<'_>, origin: &Origin, exclusive: bool) -> Registration {
        let race = self.races.fetch_add(1, Ordering::Relaxed);
        if exclusive {
            return Registration {
                race,
                offers: None,
                waiting: false,
            };
        }
        let shared_protocol = st.protocols.get(&origin.inner.key) != Some(Protocol::Http11);
        let join = (self.options.single_flight && shared_protocol)
            .then(|| st.flights.join(&origin.inner.key, || race));
        let (tx, rx) = mpsc::unbounded_channel();
        st.watchers.push(Watcher {
            race,
            origin: origin.clone(),
            offers: tx,
            resolved: Vec::new(),
            waiting: join == Some(Join::Follow),
        });
        Registration {
            race,
            offers: Some(rx),
            waiting: join == Some(Join::Follow),
        }
    }

    /// Runs the race for a registered call, and pools what it won.
    async fn connect(
        self: &Arc<Self>,
        origin: &Origin,
        reg: Registration,
        call: &Call,
    ) -> Result<Exchange, ExchangeError> {
        let exclusive = call.exclusive;
        let mut guard = RaceGuard {
            shared: Arc::clone(self),
            race: reg.race,
            origin: (!exclusive).then(|| origin.clone()),
            done: false,
        };
        let (tx, rx) = match reg.offers {
            Some(rx) => (None, rx),
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), rx)
            }
        };
        let link = RaceLink {
            waiting: reg.waiting,
            listeners: call.listeners(self),
            offers: rx,
            watch: (!exclusive).then(|| {
                Arc::new(WatchHandle {
                    shared: Arc::downgrade(self),
                    race: reg.race,
                    origin: origin.clone(),
                }) as Arc<dyn Watch>
            }),
        };
        let end = self
            .connector
            .race_linked(origin.inner.address.clone(), link)
            .await;
        drop(tx);
        match end.result {
            Err(e) => {
                guard.finish(Landing::Failed(&end.lessons));
                Err(ExchangeError::Connect(e))
            }
            Ok(Raced::Pooled { lease, story }) => {
                guard.finish(Landing::Connected(&end.lessons));
                let checkout = {
                    let mut st = self.lock();
                    let coalesced = st
                        .pool
                        .key(lease.id())
                        .is_some_and(|k| *k != origin.inner.key);
                    let source = if coalesced {
                        Source::Coalesced
                    } else {
                        Source::PooledMidRace
                    };
                    // Just offered: no health ping.
                    Lease::handed_back(lease)
                        .and_then(|lease| self.take_parts(&mut st, lease))
                        .map(|c| (c, source))
                };
                let (c, source) = checkout.ok_or(ExchangeError::Closed)?;
                Exchange::pooled(c.lease, c.parts, source, Some(story), call.listener.clone())
            }
            Ok(Raced::Connected(conn)) => {
                let (stream, story) = conn.into_story();
                let protocol = self.protocol_for(story.alpn(), origin);
                let peer = story.peer();
                let streams = self.learned_streams(origin);
                let weak = Arc::downgrade(self);
                let conn = match Conn::handshake(stream, peer, protocol, streams, weak).await {
                    Ok(c) => c,
                    Err(e) => {
                        guard.finish(Landing::Failed(&end.lessons));
                        return Err(e);
                    }
                };
                if exclusive {
                    guard.finish(Landing::Connected(&end.lessons));
                    return Ok(Exchange::exclusive(
                        conn,
                        origin.clone(),
                        story,
                        call.listener.clone(),
                    ));
                }
                let (lease, parts) = self.put(origin, conn, &mut guard, &end.lessons);
                let id = lease.id();
                let ex = Exchange::pooled(
                    lease,
                    parts,
                    Source::New,
                    Some(story),
                    call.listener.clone(),
                );
                self.offer_coalescing(id);
                ex
            }
        }
    }

    /// Pools a new connection with one exchange counted for the caller, offers its spare
    /// capacity to the races watching for its key, and lands the caller's flight.
    fn put(
        self: &Arc<Self>,
        origin: &Origin,
        mut conn: Conn,
        guard: &mut RaceGuard,
        lessons: &[Lesson],
    ) -> (Lease, Parts) {
        let parts = Parts {
            protocol: conn.protocol(),
            peer: conn.peer,
        };
        let held = match &mut conn.proto {
            Proto::Http1(s) => s.take().map_or(Held::Nothing, Held::Http1),
            Proto::Http2 { send, .. } => Held::Http2(send.clone()),
        };
        let mut st = self.lock();
        guard.done = true;
        guard.unwatch(&mut st);
        let id = self.insert(&mut st, origin, conn, true);
        guard.land(&mut st, Landing::Connected(lessons));
        drop(st);
        let mut lease = Lease::new(origin.clone(), id);
        lease.hold(held);
        (lease, parts)
    }

    /// Inserts a connection for `origin`, with one exchange counted for the caller when
    /// `taken` (idle otherwise), and offers what is free to the races watching.
    fn insert(
        self: &Arc<Self>,
        st: &mut Locked<'_>,
        origin: &Origin,
        conn: Conn,
        taken: bool,
    ) -> PooledId {
        let t = now();
        st.clock = st.clock.max(t);
        let protocol = conn.protocol();
        let peer = conn.peer;
        let health = Arc::clone(&conn.health);
        let max = health
            .max_streams()
            .or_else(|| st.protocols.max_streams(&origin.inner.key))
            .unwrap_or(0);
        let id = st
            .pool
            .insert(origin.inner.key.clone(), conn, protocol, max, t);
        health.set_id(id);
        st.pool.set_peer(id, peer);
        if taken {
            st.pool.acquire_id(id);
        }
        st.protocols.remember(&origin.inner.key, protocol);
        self.offer_capacity(st, id);
        if !st.monitor_running {
            st.monitor_running = self.start_monitor();
        }
        self.monitor.notify_one();
        id
    }

    /// Opens one connection to `origin` and pools it idle (for [`Pool::keep_warm`]).
    async fn open_idle(self: &Arc<Self>, origin: &Origin) -> Result<(), ExchangeError> {
        let (_tx, rx) = mpsc::unbounded_channel();
        let link = RaceLink {
            waiting: false,
            listeners: Listeners {
                call: None,
                connection: self.listener.clone(),
            },
            offers: rx,
            watch: None,
        };
        let end = self
            .connector
            .race_linked(origin.inner.address.clone(), link)
            .await;
        let conn = match end.result.map_err(ExchangeError::Connect)? {
            Raced::Connected(conn) => conn,
            // Only offered to races that watch, which this one does not.
            Raced::Pooled { .. } => return Ok(()),
        };
        let (stream, story) = conn.into_story();
        let protocol = self.protocol_for(story.alpn(), origin);
        let streams = self.learned_streams(origin);
        let weak = Arc::downgrade(self);
        let conn = Conn::handshake(stream, story.peer(), protocol, streams, weak).await?;
        let mut st = self.lock();
        let id = self.insert(&mut st, origin, conn, false);
        drop(st);
        self.offer_coalescing(id);
        Ok(())
    }

    /// The protocol a new connection speaks: ALPN's choice, or prior-knowledge h2 on
    /// cleartext when the options say so (RFC 9113 §3.3).
    fn protocol_for(&self, alpn: Option<&Alpn>, origin: &Origin) -> Protocol {
        match (alpn, origin.is_tls()) {
            (Some(Alpn::H2), true) => Protocol::Http2,
            (_, false) if self.options.prior_knowledge_h2 => Protocol::Http2,
            _ => Protocol::Http11,
        }
    }

    /// The HTTP/2 stream limit `origin`'s server set on an earlier connection: a new one
    /// opens no more streams than that before its SETTINGS arrive (RFC 9113 §5.1.2).
    fn learned_streams(&self, origin: &Origin) -> Option<u32> {
        let st = self.lock();
        st.protocols
            .max_streams(&origin.inner.key)
            .filter(|&n| n > 0)
    }

    /// Offers free exchanges on `id` to the races watching for its key, one each.
    fn offer_capacity(self: &Arc<Self>, st: &mut Locked<'_>, id: PooledId) {
        loop {
            let state: &mut State = st;
            if state.watchers.is_empty() {
                return;
            }
            let Some(key) = state.pool.key(id) else {
                return;
            };
            let Some(i) = state
                .watchers
                .iter()
                .position(|w| w.origin.inner.key == *key)
            else {
                return;
            };
            if !state.pool.acquire_id(id) {
                return;
            }
            let w = state.watchers.swap_remove(i);
            self.send_offer(st, w, id);
        }
    }

    /// Sends a reservation on `id` to watcher `w` (already removed from the list). If the race
    /// is gone the reservation is undone at once.
    fn send_offer(self: &Arc<Self>, st: &mut Locked<'_>, w: Watcher, id: PooledId) {
        let lease = Lease::new(w.origin.clone(), id);
        if let Err(mpsc::error::SendError(Offer::Pooled(lease))) =
            w.offers.send(Offer::Pooled(lease.offered()))
            && let Some(lease) = Lease::handed_back(lease)
        {
            let id = lease.into_id();
            self.release_locked(st, id, None, true, false);
        }
        st.trash.push(Trash::Watcher(w));
    }

    /// Offers HTTP/2 connection `id` to the races of other hosts it may be coalesced for.
    /// Certificates are checked outside the lock, then the offer is made under it.
    fn offer_coalescing(self: &Arc<Self>, id: PooledId) {
        let candidates: Vec<(u64, PoolKey, Vec<IpAddr>)> = {
            let st = self.lock();
            st.watchers
                .iter()
                .filter(|w| !w.resolved.is_empty())
                .map(|w| (w.race, w.origin.inner.key.clone(), w.resolved.clone()))
                .collect()
        };
        for (race, key, resolved) in candidates {
            let usable = {
                let st = self.lock();
                st.pool
                    .coalescing_candidates(&key, &resolved)
                    .any(|c| c == id)
            };
            if usable && self.covers(id, key.host()) {
                self.offer_to(race, id);
            }
        }
    }

    /// Whether connection `id`'s certificate covers `host`, asked of the connector's own
    /// verifier (the chain and the name, as a handshake for `host` would check them).
    fn covers(&self, id: PooledId, host: &str) -> bool {
        let Some(verifier) = self.connector.certificate_verifier() else {
            return false;
        };
        let certs = {
            let st = self.lock();
            st.pool.get(id).and_then(|c| c.certs.clone())
        };
        let (Some(certs), Ok(name)) = (certs, ServerName::try_from(host.to_owned())) else {
            return false;
        };
        let Some((leaf, intermediates)) = certs.split_first() else {
            return false;
        };
        verifier
            .verify_server_cert(leaf, intermediates, &name, &[], UnixTime::now())
            .is_ok()
    }

    /// Offers one exchange on `id` to race `race`, if it still watches and `id` has room.
    fn offer_to(self: &Arc<Self>, race: u64, id: PooledId) {
        let mut st = self.lock();
        let Some(i) = st.watchers.iter().position(|w| w.race == race) else {
            return;
        };
        if !st.pool.acquire_id(id) {
            return;
        }
        let w = st.watchers.swap_remove(i);
        self.send_offer(&mut st, w, id);
    }

    /// A race learned addresses of its host: store them, and offer a pooled HTTP/2 connection
    /// it may be coalesced onto (§3.7: peer IP among the resolved addresses, same port, no
    /// proxy, accepting exchanges, certificate covering the host).
    fn resolved(self: &Arc<Self>, race: u64, addresses: &[IpAddr]) {
        let (key, candidates) = {
            let mut st = self.lock();
            let Some(w) = st.watchers.iter_mut().find(|w| w.race == race) else {
                return;
            };
            for a in addresses {
                if !w.resolved.contains(a) {
                    w.resolved.push(*a);
                }
            }
            let (key, resolved) = (w.origin.inner.key.clone(), w.resolved.clone());
            let candidates: Vec<PooledId> =
                st.pool.coalescing_candidates(&key, &resolved).collect();
            (key, candidates)
        };
        for id in candidates {
            if self.covers(id, key.host()) {
                self.offer_to(race, id);
                return;
            }
        }
    }

    /// Ends one exchange on `id`. `h1` is the HTTP/1 sender the exchange held; `reusable`
    /// says whether the connection may carry another exchange; `announced` whether the
    /// listener heard it acquired (an offer a race refused was not).
    fn release(
        self: &Arc<Self>,
        id: PooledId,
        h1: Option<H1Sender>,
        reusable: bool,
        announced: bool,
    ) {
        let mut st = self.lock();
        self.release_locked(&mut st, id, h1, reusable, announced);
    }

    fn release_locked(
        self: &Arc<Self>,
        st: &mut Locked<'_>,
        id: PooledId,
        h1: Option<H1Sender>,
        reusable: bool,
        announced: bool,
    ) {
        if !reusable {
            // An HTTP/2 connection finishes its other streams; HTTP/1 closes below.
            st.retire(id);
            self.rescue_waiters(st, id);
        }
        let t = now();
        st.clock = t;
        let released = st.pool.release_with(id, t, |conn| {
            let healthy = reusable && !conn.health.is_closed();
            match &mut conn.proto {
                Proto::Http1(slot) => match h1 {
                    Some(s) if healthy && !s.is_closed() => {
                        *slot = Some(s);
                        true
                    }
                    // The sender stayed in the pool (an offer that was not taken).
                    None => healthy && slot.is_some(),
                    Some(_) => false,
                },
                Proto::Http2 { .. } => true,
            }
        });
        match released {
            fastfallback_pool::Release::Close(c) => {
                if announced {
                    st.event(|| ConnectionEvent::Released { connection: id.0 });
                }
                st.close(c);
            }
            fastfallback_pool::Release::Ignored => {}
            fastfallback_pool::Release::Released => {
                if announced {
                    st.event(|| ConnectionEvent::Released { connection: id.0 });
                }
                self.offer_capacity(st, id);
                // The monitor already sleeps no longer than the keep-alive of the oldest
                // idle connection (or the whole keep-alive when none was idle), so a
                // connection becoming idle needs no wake-up, unless the idle limit may now be
                // exceeded.
                if st.pool.len() > st.pool.config().max_idle && st.pool.allocations(id) == Some(0) {
                    self.monitor.notify_one();
                }
            }
        }
    }

    /// Connection `id` takes no new exchange (an error on it, a GOAWAY).
    fn no_new_exchanges(&self, id: PooledId) {
        let mut st = self.lock();
        st.retire(id);
        self.rescue_waiters(&mut st, id);
    }

    /// After connection `id` stopped taking new exchanges: if calls wait for a stream on its
    /// key and nothing else can give them one (no HTTP/2 connection of the key takes new
    /// exchanges, no connect in flight), the first waiter leads a new connect and the others
    /// follow it.
    fn rescue_waiters(&self, st: &mut Locked<'_>, id: PooledId) {
        let Some(key) = st.pool.key(id).cloned() else {
            return;
        };
        if st.flights.is_flying(&key) || st.pool.multiplexes(&key) {
            return;
        }
        let state: &mut State = st;
        let mut waiters = state
            .watchers
            .iter_mut()
            .filter(|w| w.waiting && w.origin.inner.key == key);
        let Some(leader) = waiters.next() else {
            return;
        };
        leader.waiting = false;
        let _ = leader.offers.send(Offer::Release(Vec::new()));
        state.flights.join(&key, || leader.race);
        for w in waiters {
            state.flights.join(&key, || w.race);
        }
    }

    /// A 421 answered over coalesced connection `id`: never use it for that host again.
    fn misdirected(&self, id: PooledId, origin: &Origin) {
        let mut st = self.lock();
        st.pool.forbid_coalescing(id, origin.inner.key.host());
    }

    /// A connection's task ended: it takes no new exchange and is closed once idle.
    fn connection_ended(&self, health: &Health) {
        let mut st = self.lock();
        if let Some(id) = health.id() {
            st.retire(id);
            self.rescue_waiters(&mut st, id);
            if st.pool.allocations(id) == Some(0)
                && let Some(c) = st.pool.remove(id)
            {
                st.close(c);
            }
        }
    }

    /// An HTTP/2 peer's SETTINGS arrived: its stream limit replaces the provisional one.
    fn settings_known(self: &Arc<Self>, health: &Health) {
        let mut st = self.lock();
        if let (Some(id), Some(max)) = (health.id(), health.max_streams()) {
            st.pool.set_max_streams(id, max);
            if let Some(key) = st.pool.key(id).cloned() {
                st.protocols.remember_max_streams(&key, max);
            }
            self.offer_capacity(&mut st, id);
        }
    }

    /// Starts the idle monitor if a runtime is there; returns whether it runs.
    fn start_monitor(self: &Arc<Self>) -> bool {
        if tokio::runtime::Handle::try_current().is_err() {
            return false;
        }
        let weak = Arc::downgrade(self);
        let wake = Arc::clone(&self.monitor);
        tokio::spawn(idle_monitor(weak, wake));
        true
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Wakes the idle monitor so it sees the pool is gone and stops.
        self.monitor.notify_one();
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for (_, warmer) in state.warmers.drain() {
            warmer.abort();
        }
    }
}

/// How often a warmer looks again without being woken.
const WARM_RECHECK: Duration = Duration::from_secs(1);

/// The task behind [`Pool::keep_warm`] for one origin. It holds the pool weakly: a dropped
/// pool stops it.
struct Warmer {
    pool: Weak<Shared>,
    address: Address,
    key: PoolKey,
    min: u64,
    wake: Arc<tokio::sync::Notify>,
}

impl Warmer {
    async fn run(self) {
        let mut failures = 0u32;
        // Jitter from the key's hash: spread, and repeatable per origin.
        let mut rng = {
            use std::hash::BuildHasher;
            fastfallback_proto::FxBuildHasher::default().hash_one(&self.key) | 1
        };
        loop {
            let Some(shared) = self.pool.upgrade() else {
                return;
            };
            let short = shared.lock().pool.capacity(&self.key) < self.min;
            if short {
                let origin = Origin {
                    inner: Arc::new(OriginInner {
                        shared: Arc::clone(&shared),
                        address: self.address.clone(),
                        key: self.key.clone(),
                    }),
                };
                let opened = shared.open_idle(&origin).await;
                let (base, max) = (shared.options.warm_backoff, shared.options.warm_backoff_max);
                drop((origin, shared));
                match opened {
                    Ok(()) => failures = 0,
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let wait = backoff(base, max, failures, &mut rng);
                        tracing::debug!(origin = %self.address, error = %e, ?wait, "warm-up failed");
                        tokio::time::sleep(wait).await;
                    }
                }
                continue;
            }
            drop(shared);
            let _ = tokio::time::timeout(WARM_RECHECK, self.wake.notified()).await;
        }
    }
}

/// The wait after the `failures`-th failure in a row: `base` doubled per further failure,
/// at most `max`, times a jitter in [0.8, 1.2).
fn backoff(base: Duration, max: Duration, failures: u32, rng: &mut u64) -> Duration {
    let doubled = base.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    let wait = doubled.min(max);
    // xorshift64
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let unit = (*rng >> 11) as f64 / (1u64 << 53) as f64;
    wait.mul_f64(0.8 + 0.4 * unit)
}

/// Apache HttpClient's idle connection monitor: closes connections whose keep-alive ran out
/// (and idle ones beyond the limit) at the time cleanup says, without waiting for a call.
async fn idle_monitor(pool: Weak<Shared>, wake: Arc<tokio::sync::Notify>) {
    loop {
        let next = {
            let Some(shared) = pool.upgrade() else {
                return;
            };
            let mut st = shared.lock();
            let t = now();
            st.clock = t;
            let c = st.pool.cleanup(t);
            for closed in c.closed {
                st.close(closed);
            }
            if c.next_run.is_none() {
                st.monitor_running = false;
                return;
            }
            c.next_run
        };
        match next {
            Some(Duration::ZERO) => {}
            Some(d) => {
                let _ = tokio::time::timeout(d, wake.notified()).await;
            }
            None => return,
        }
    }
}

/// How a race run for the pool ended, for the flight it may lead.
#[derive(Clone, Copy)]
enum Landing<'a> {
    /// It has a connection (new or offered), or it ran for an exclusive call.
    Connected(&'a [Lesson]),
    /// It failed: its followers race on their own, with what it taught route memory.
    Failed(&'a [Lesson]),
    /// Its call was dropped before the race ended.
    Dropped,
}

/// Unregisters a call's race from the pool when it ends or is dropped, and lands the flight
/// it leads, if it does (a follower can be handed the lead when its leader is dropped).
struct RaceGuard {
    shared: Arc<Shared>,
    race: u64,
    /// The origin the race connects to; `None` for an exclusive call (never watching).
    origin: Option<Origin>,
    /// Landed already.
    done: bool,
}

impl RaceGuard {
    fn unwatch(&self, st: &mut Locked<'_>) {
        if let Some(i) = st.watchers.iter().position(|w| w.race == self.race) {
            let w = st.watchers.swap_remove(i);
            if w.waiting {
                st.flights.leave(&w.origin.inner.key, &self.race);
            }
            st.trash.push(Trash::Watcher(w));
        }
    }

    /// Ends the flight this call leads, if it leads one:
    /// - a connection was had and the key has an HTTP/2 connection taking exchanges: the
    ///   followers not offered a stream yet keep waiting for one (streams are offered as they
    ///   free up);
    /// - the call was dropped with no such connection: the first follower takes the connect
    ///   over, the others keep following it;
    /// - otherwise (HTTP/1, or the race failed): the followers get `lessons` and race.
    fn land(&self, st: &mut Locked<'_>, landing: Landing<'_>) {
        let Some(origin) = &self.origin else {
            return;
        };
        let key = &origin.inner.key;
        if st.flights.leader(key) != Some(&self.race) {
            return;
        }
        let shared_conn = st.pool.multiplexes(key);
        let lessons = match landing {
            Landing::Connected(_) | Landing::Dropped if shared_conn => {
                st.flights.land(key);
                return;
            }
            Landing::Dropped => {
                if let Some(next) = st.flights.hand_over(key)
                    && let Some(w) = st.watchers.iter_mut().find(|w| w.race == next)
                {
                    w.waiting = false;
                    let _ = w.offers.send(Offer::Release(Vec::new()));
                }
                return;
            }
            Landing::Connected(lessons) | Landing::Failed(lessons) => lessons,
        };
        for follower in st.flights.land(key) {
            if let Some(w) = st.watchers.iter_mut().find(|w| w.race == follower) {
                w.waiting = false;
                let _ = w.offers.send(Offer::Release(lessons.to_vec()));
            }
        }
    }

    fn finish(&mut self, landing: Landing<'_>) {
        if self.done {
            return;
        }
        self.done = true;
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock();
        self.unwatch(&mut st);
        self.land(&mut st, landing);
    }
}

impl Drop for RaceGuard {
    fn drop(&mut self) {
        self.finish(Landing::Dropped);
    }
}

/// The race's window on the pool: it reports what it resolved, and hands over the attempts
/// it kept after losing.
struct WatchHandle {
    shared: Weak<Shared>,
    race: u64,
    origin: Origin,
}

impl Watch for WatchHandle {
    fn resolved(&self, addresses: &[IpAddr]) {
        if let Some(shared) = self.shared.upgrade() {
            shared.resolved(self.race, addresses);
        }
    }

    /// `SpareWinners::Pool`: a losing attempt that still connects over HTTP/2 is pooled idle
    /// (its streams can serve the next calls); anything else is closed.
    fn adopt(&self, spare: Spare) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let origin = self.origin.clone();
        tokio::spawn(async move {
            let end = spare.await;
            let shared = Arc::clone(&origin.inner.shared);
            let (attempt, route) = (end.attempt.get(), end.route);
            let Some((stream, alpn)) = end.connected else {
                if let Some(l) = &shared.listener {
                    l.event(&ConnectionEvent::ConnectFailed {
                        attempt,
                        route,
                        error: "kept after losing the race; did not connect".to_owned(),
                    });
                }
                return;
            };
            if let Some(l) = &shared.listener {
                l.event(&ConnectionEvent::ConnectEnd { attempt, route });
            }
            let peer = route;
            if shared.protocol_for(alpn.as_ref(), &origin) != Protocol::Http2 {
                // Not worth keeping: dropping it closes it.
                return;
            }
            let weak = Arc::downgrade(&shared);
            let streams = shared.learned_streams(&origin);
            let Ok(conn) = Conn::handshake(stream, peer, Protocol::Http2, streams, weak).await
            else {
                return;
            };
            let mut st = shared.lock();
            let id = shared.insert(&mut st, &origin, conn, false);
            drop(st);
            shared.offer_coalescing(id);
        });
    }
}
