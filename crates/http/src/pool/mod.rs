//! [`Pool`]: connection reuse wired into the race.
//!
//! An HTTP client asks the pool for an [`Exchange`] to an [`Origin`]. The pool hands out a
//! pooled connection when one can carry the exchange, else it runs a race. While the race runs
//! the pool may end it: when a usable connection for the same key (or an HTTP/2 connection
//! that may be coalesced) enters the pool, the pool reserves a stream on it and sends it to the
//! race, which ends on it in the same turn (`handle_pooled`) and cancels its attempts. Nothing
//! polls: the offer is an event.
//!
//! The decisions (which race is offered which connection, which waiting race is released)
//! are the board's, sans-IO; this module and its files carry them out.
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
//! - All pool state ([`fastfallback_pool::ConnectionPool`], the protocol memory and the
//!   [`fastfallback_pool::RaceBoard`] of races watching for connections, with their single
//!   flights) sits under one `std::sync::Mutex`, held only for
//!   bookkeeping: never across an `.await`, never while verifying a certificate, never while
//!   dropping a connection (connections, channels and leases taken out under the lock are
//!   dropped after it is released, see `Locked`).
//! - Per-connection state stays with the connection: each connection's task owns its socket;
//!   an HTTP/2 connection's PING handle has its own async lock, taken only outside the pool
//!   lock.
//! - A connection's task tells the pool when it ends or learns the peer's stream limit by
//!   taking the pool lock briefly; it never holds another lock then.

mod checkout;
mod conn;
#[cfg(feature = "http3")]
mod early;
mod exchange;
mod origin;
mod race;
mod release;
mod service;
mod warm;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use fastfallback_pool::{ConnectionPool, PoolConfig, PoolKey, ProtocolMemory, RaceBoard};
use fastfallback_proto::PooledId;
use fastfallback_route::{Address, Host, Scheme};
use tokio::sync::mpsc;
use tracing::Instrument;

use conn::Conn;
pub use exchange::{Body, Exchange};
use fastfallback_net::link::{Listeners, Offer, now};
use fastfallback_net::{
    CallEvent, ConnectionEvent, ConnectionListener, Connector, EventListener, Source,
};
use origin::OriginInner;
pub use origin::{ExchangeError, Origin, PoolOptions};
pub use service::RequestBody;

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
}

struct State {
    pool: ConnectionPool<Conn>,
    /// The races watching the pool, and the single flights they make.
    board: RaceBoard<Watcher>,
    protocols: ProtocolMemory,
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

/// What the pool keeps with a race on its board (which keeps the race's key, whether it
/// waits and what it resolved): where to send it offers.
struct Watcher {
    /// The origin the race connects to: an offered lease holds it.
    origin: Origin,
    offers: mpsc::UnboundedSender<Offer>,
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
                    board: RaceBoard::default(),
                    protocols: ProtocolMemory::new(options.protocol_memory),
                    monitor_running: false,
                    clock: now(),
                    warmers: Default::default(),
                }),
                monitor: Arc::new(tokio::sync::Notify::new()),
                warm: Arc::new(tokio::sync::Notify::new()),
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
            inner: Arc::new(OriginInner::new(Arc::clone(&self.shared), address, key)),
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
        let plain = call.listener.is_none() && !call.exclusive && !call.sends_early();
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
    /// With [`PoolOptions::early_data`] an idempotent request that needs a new connection
    /// rides a resuming QUIC attempt's 0-RTT, and its response carries [`SentEarly`].
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
        #[cfg(feature = "http3")]
        let exchange = match self.shared.early_request(&request) {
            Some(early) => {
                let call = Call {
                    early: Some(early),
                    ..Call::default()
                };
                self.exchange_with(&origin, call).await?
            }
            None => self.exchange(&origin).await?,
        };
        #[cfg(not(feature = "http3"))]
        let exchange = self.exchange(&origin).await?;
        let replay = (exchange.is_reused() && request.method().is_idempotent())
            .then(|| copy_request(&request, request.body().clone()));
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
        self.shared
            .keep_warm(self.rebind(origin), min_concurrent_calls);
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
            watching: st.board.len(),
            flights: st.board.flights(),
        }
    }
}

/// A copy of `request`'s head with `body`, to send it again.
fn copy_request<B>(request: &http::Request<B>, body: bytes::Bytes) -> http::Request<bytes::Bytes> {
    let mut again = http::Request::new(body);
    *again.method_mut() = request.method().clone();
    *again.uri_mut() = request.uri().clone();
    *again.version_mut() = request.version();
    *again.headers_mut() = request.headers().clone();
    again
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
    /// The request [`Pool::send`] sends in 0-RTT if the race allows it.
    #[cfg(feature = "http3")]
    early: Option<early::EarlyRequest>,
}

/// In a response's extensions: its request went out in QUIC 0-RTT
/// ([`PoolOptions::early_data`]), so the server may have seen it more than once (RFC 9001
/// §9.2).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct SentEarly;

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
    #[cfg(feature = "http3")]
    early: None,
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

    /// Whether the call carries a request to send in 0-RTT.
    fn sends_early(&self) -> bool {
        #[cfg(feature = "http3")]
        return self.early.is_some();
        #[cfg(not(feature = "http3"))]
        false
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

/// closed before the call could take it.
const STALE_OFFERS: u32 = 3;

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

    /// `request`, when [`PoolOptions::early_data`] lets it ride a QUIC attempt's 0-RTT: the
    /// option is on, the connector races QUIC, and the request is idempotent.
    #[cfg(feature = "http3")]
    fn early_request(&self, request: &http::Request<bytes::Bytes>) -> Option<early::EarlyRequest> {
        if !self.options.early_data || !self.connector.policy().quic {
            return None;
        }
        early::EarlyRequest::of(request)
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
