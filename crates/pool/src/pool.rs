//! The pool itself: entries, allocation, release and OkHttp-style eviction.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use fastfallback_proto::{FxBuildHasher, Instant, PooledId, Protocol};

/// The stream limit an HTTP/2 connection gets when it is inserted with `max_streams == 0`,
/// that is before the peer's SETTINGS frame has said how many concurrent streams it allows.
///
/// RFC 9113 §6.5.2 recommends peers allow at least 100 concurrent streams, so 100 is a safe
/// guess until [`ConnectionPool::set_max_streams`] reports the real value.
pub const PROVISIONAL_MAX_STREAMS: u32 = 100;

/// Which connections can serve a request: everything that makes two connections
/// interchangeable. Connections whose keys differ in any field never share.
///
/// A key computes its hash once, when it is built: the pool looks keys up on every checkout
/// and release, and hashing the host name each time would cost more than the rest of the
/// lookup.
///
/// ```
/// use fastfallback_pool::PoolKey;
///
/// let key = PoolKey::new("example.com", 443, true);
/// assert_eq!(key.host(), "example.com");
/// let other_tls = key.clone().with_tls_config(7);
/// assert_ne!(key, other_tls);
/// ```
#[derive(Clone, Debug, Eq)]
pub struct PoolKey {
    /// The hash of the fields below (FxHash), kept in step by every constructor.
    hash: u64,
    host: String,
    port: u16,
    tls: bool,
    tls_config: u64,
    proxy: Option<String>,
}

impl PartialEq for PoolKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.port == other.port
            && self.tls == other.tls
            && self.tls_config == other.tls_config
            && self.host == other.host
            && self.proxy == other.proxy
    }
}

impl std::hash::Hash for PoolKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PoolKey {
    /// A direct key for `host:port`, with or without TLS, with the default TLS configuration.
    pub fn new(host: impl Into<String>, port: u16, tls: bool) -> Self {
        Self {
            hash: 0,
            host: host.into(),
            port,
            tls,
            tls_config: 0,
            proxy: None,
        }
        .rehash()
    }

    /// The same key for connections made with TLS configuration `id`.
    #[must_use]
    pub fn with_tls_config(mut self, id: u64) -> Self {
        self.tls_config = id;
        self.rehash()
    }

    /// The same key for connections through `proxy`.
    #[must_use]
    pub fn with_proxy(mut self, proxy: impl Into<String>) -> Self {
        self.proxy = Some(proxy.into());
        self.rehash()
    }

    fn rehash(mut self) -> Self {
        use std::hash::{Hash, Hasher};
        let mut h = fastfallback_proto::FxHasher::default();
        self.host.hash(&mut h);
        self.port.hash(&mut h);
        self.tls.hash(&mut h);
        self.tls_config.hash(&mut h);
        self.proxy.hash(&mut h);
        self.hash = h.finish();
        self
    }

    /// The host name the connection was made for.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the connection runs TLS.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// Which TLS configuration made it (an identity the driver assigns; 0 for the default).
    pub fn tls_config(&self) -> u64 {
        self.tls_config
    }

    /// The proxy it goes through (`kind host:port`), if any. Connections through a proxy never
    /// carry another host's exchanges.
    pub fn proxy(&self) -> Option<&str> {
        self.proxy.as_deref()
    }

    /// Whether a connection made for `self` may be offered to `other`'s host when the other
    /// conditions of coalescing hold: same port, same TLS and configuration, and no proxy on
    /// either side (OkHttp's `equalsNonHost` plus its direct-route rule).
    pub fn may_coalesce_with(&self, other: &Self) -> bool {
        self.port == other.port
            && self.tls == other.tls
            && self.tls_config == other.tls_config
            && self.proxy.is_none()
            && other.proxy.is_none()
    }
}

/// How long idle connections are kept and how many of them.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct PoolConfig {
    /// A connection idle for at least this long is closed by the next
    /// [`ConnectionPool::cleanup`].
    pub keep_alive: Duration,
    /// The most idle connections kept; beyond that the one idle the longest is closed.
    pub max_idle: usize,
}

impl Default for PoolConfig {
    /// 256 idle connections (Chromium's pool-wide socket limit), kept for 5 minutes (OkHttp's
    /// keep-alive), as `fastfallback_plan::PoolPolicy`'s default (which explains the limit).
    fn default() -> Self {
        Self {
            keep_alive: Duration::from_secs(300),
            max_idle: 256,
        }
    }
}

/// What one [`ConnectionPool::cleanup`] call did and when to call it again.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Cleanup<C> {
    /// Connections that left the pool; the caller must close them.
    pub closed: Vec<C>,
    /// When to run cleanup again, counted from the `now` passed in:
    ///
    /// - `Some(Duration::ZERO)` right after an eviction (there may be more to evict);
    /// - the time until the connection idle the longest reaches the keep-alive;
    /// - the keep-alive itself when every connection is in use;
    /// - `None` when the pool is empty (nothing to do until a connection is inserted).
    pub next_run: Option<Duration>,
}

/// The outcome of [`ConnectionPool::release`].
#[derive(Clone, Debug, Eq, PartialEq)]
#[must_use = "`Release::Close` carries a connection the caller must close"]
pub enum Release<C> {
    /// The id is unknown or its connection carried no exchange: nothing changed.
    Ignored,
    /// One exchange ended; the connection stays in the pool (idle if that was its last one).
    Released,
    /// The last exchange of a connection marked with
    /// [`ConnectionPool::mark_no_new_exchanges`] ended: the connection left the pool and the
    /// caller must close it.
    Close(C),
}

impl<C> Release<C> {
    /// Whether the id was known and an exchange was released (the `bool` view of the outcome).
    pub fn is_released(&self) -> bool {
        !matches!(self, Self::Ignored)
    }
}

/// The connections of one key, arranged for acquisition in O(1) on HTTP/1.
#[derive(Clone, Debug, Default)]
struct KeyConns {
    /// HTTP/2 connections, in insertion order (the oldest with a free stream is chosen).
    multiplexed: Vec<u64>,
    /// Idle HTTP/1 connections that take exchanges, with the time each became idle, in that
    /// order: the top is the most recent (LIFO, so the others age out). Exactly the idle,
    /// unmarked ones.
    idle: Vec<(Instant, u64)>,
    /// How many HTTP/1 connections the key has, idle or not.
    http1: usize,
}

impl KeyConns {
    fn is_empty(&self) -> bool {
        self.multiplexed.is_empty() && self.http1 == 0
    }
}

/// A connection [`ConnectionPool::acquire_entry`] handed out, with one exchange counted.
#[derive(Debug)]
pub struct Acquired<'a, C> {
    /// Its id.
    pub id: PooledId,
    /// The caller's handle.
    pub conn: &'a mut C,
    /// Since when it had been idle, if it was (HTTP/2 health pings are sent after a while).
    pub idle_since: Option<Instant>,
    /// Exchanges it carries now, this one included.
    pub allocations: u32,
}

/// One pooled connection and its bookkeeping.
#[derive(Clone, Debug)]
struct Entry<C> {
    key: PoolKey,
    conn: C,
    protocol: Protocol,
    /// How many exchanges it may carry at once.
    limit: u32,
    /// How many exchanges it carries now.
    allocations: u32,
    /// When it last became idle; meaningful only while `allocations == 0`.
    idle_since: Instant,
    /// Never hand it out again; close it when `allocations` reaches 0.
    no_new_exchanges: bool,
    /// The address it is connected to, for coalescing (unknown: never coalesced).
    peer: Option<SocketAddr>,
    /// Hosts it must not serve although it could be coalesced (they answered 421).
    not_for: Vec<String>,
}

impl<C> Entry<C> {
    fn is_idle(&self) -> bool {
        self.allocations == 0
    }

    /// Whether this connection may carry an exchange for `key`, whose host resolved to
    /// `resolved`, by coalescing (all but the certificate check).
    fn may_coalesce(&self, key: &PoolKey, resolved: &[IpAddr]) -> bool {
        self.protocol.is_multiplexed()
            && !self.no_new_exchanges
            && self.allocations < self.limit
            && self.key.host != key.host
            && self.key.may_coalesce_with(key)
            && self
                .peer
                .is_some_and(|p| p.port() == key.port && resolved.contains(&p.ip()))
            && !self.not_for.contains(&key.host)
    }
}

/// Bookkeeping for reusable connections: which ones serve which [`PoolKey`], how many exchanges
/// each carries, and which idle ones must be closed.
///
/// The pool stores caller-provided handles `C` and never performs I/O. Time is passed in as
/// `now`. Rules:
///
/// - A connection is inserted idle (no exchange) with [`insert`](Self::insert).
/// - An HTTP/1 connection carries one exchange at a time; an HTTP/2 connection carries up to the
///   peer's stream limit ([`PROVISIONAL_MAX_STREAMS`] until known).
/// - [`acquire`](Self::acquire) prefers an HTTP/2 connection with a free stream, else the HTTP/1
///   connection that became idle most recently (LIFO, so the others age out).
/// - [`cleanup`](Self::cleanup) follows OkHttp's `closeConnections(now)`: at most one eviction
///   per call, of the connection idle the longest, when it has been idle for the keep-alive or
///   when more than `max_idle` connections are idle. Connections in use are never evicted.
///
/// ```
/// use fastfallback_pool::{Cleanup, ConnectionPool, PoolConfig, PoolKey, Release};
/// use fastfallback_proto::{Instant, Protocol};
/// use std::time::Duration;
///
/// let config = PoolConfig { keep_alive: Duration::from_millis(100), max_idle: 5 };
/// let mut pool = ConnectionPool::new(config);
/// let key = PoolKey::new("example.com", 443, true);
///
/// // A fresh HTTP/1 connection, idle since t = 0.
/// let id = pool.insert(key.clone(), "conn-1", Protocol::Http11, 0, Instant::ZERO);
///
/// // One call uses it; a second call at the same time finds nothing free.
/// assert_eq!(pool.acquire(&key, Instant::from_millis(10)), Some(id));
/// assert_eq!(pool.acquire(&key, Instant::from_millis(10)), None);
///
/// // The exchange ends at t = 20: the connection is idle again.
/// assert_eq!(pool.release(id, Instant::from_millis(20)), Release::Released);
/// assert_eq!(pool.idle_count(), 1);
///
/// // Cleanup at t = 50: 30 ms idle, 70 ms to go before the keep-alive runs out.
/// let c = pool.cleanup(Instant::from_millis(50));
/// assert!(c.closed.is_empty());
/// assert_eq!(c.next_run, Some(Duration::from_millis(70)));
///
/// // At t = 120 it has been idle for 100 ms: evicted and handed back for closing.
/// assert_eq!(
///     pool.cleanup(Instant::from_millis(120)),
///     Cleanup { closed: vec!["conn-1"], next_run: Some(Duration::ZERO) }
/// );
/// assert!(pool.is_empty());
/// ```
///
/// HTTP/2 connections are shared:
///
/// ```
/// use fastfallback_pool::{ConnectionPool, PoolConfig, PoolKey};
/// use fastfallback_proto::{Instant, Protocol};
///
/// let mut pool = ConnectionPool::new(PoolConfig::default());
/// let key = PoolKey::new("example.com", 443, true);
/// let now = Instant::ZERO;
/// let h2 = pool.insert(key.clone(), 7u32, Protocol::Http2, 2, now);
///
/// assert_eq!(pool.acquire(&key, now), Some(h2));
/// assert_eq!(pool.acquire(&key, now), Some(h2));
/// assert_eq!(pool.acquire(&key, now), None); // both streams busy
/// assert_eq!(pool.allocations(h2), Some(2));
/// assert_eq!(pool.get(h2), Some(&7));
/// ```
#[derive(Clone, Debug)]
pub struct ConnectionPool<C> {
    config: PoolConfig,
    /// Every connection, by id. Ids grow with insertion, so sorting ids gives insertion order
    /// where an order matters (cleanup ties, coalescing candidates); lookups are one hash.
    entries: HashMap<u64, Entry<C>, FxBuildHasher>,
    /// The connections serving each key.
    by_key: HashMap<PoolKey, KeyConns, FxBuildHasher>,
    /// The id the next inserted connection gets.
    next_id: u64,
}

impl<C> ConnectionPool<C> {
    /// An empty pool.
    pub fn new(config: PoolConfig) -> Self {
        Self {
            config,
            entries: HashMap::default(),
            by_key: HashMap::default(),
            next_id: 1,
        }
    }

    /// The configuration given at construction.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// Adds a connection serving `key`. It starts with no exchange, idle since `now`.
    ///
    /// `max_streams` is the peer's `SETTINGS_MAX_CONCURRENT_STREAMS` for HTTP/2; `0` means
    /// "not known yet" and gives the provisional limit [`PROVISIONAL_MAX_STREAMS`]. HTTP/1
    /// connections ignore it: their limit is always 1.
    pub fn insert(
        &mut self,
        key: PoolKey,
        conn: C,
        protocol: Protocol,
        max_streams: u32,
        now: Instant,
    ) -> PooledId {
        let id = self.next_id;
        self.next_id += 1;
        let limit = if !protocol.is_multiplexed() {
            1
        } else if max_streams == 0 {
            PROVISIONAL_MAX_STREAMS
        } else {
            max_streams
        };
        let conns = self.by_key.entry(key.clone()).or_default();
        if protocol.is_multiplexed() {
            conns.multiplexed.push(id);
        } else {
            conns.http1 += 1;
            conns.idle.push((now, id));
        }
        self.entries.insert(
            id,
            Entry {
                key,
                conn,
                protocol,
                limit,
                allocations: 0,
                idle_since: now,
                no_new_exchanges: false,
                peer: None,
                not_for: Vec::new(),
            },
        );
        PooledId(id)
    }

    /// Records the address connection `id` is connected to, which makes it a candidate for
    /// coalescing if it is HTTP/2 (see [`Self::coalescing_candidates`]). Returns whether the id
    /// is known.
    pub fn set_peer(&mut self, id: PooledId, peer: SocketAddr) -> bool {
        match self.entries.get_mut(&id.0) {
            Some(e) => {
                e.peer = Some(peer);
                true
            }
            None => false,
        }
    }

    /// HTTP/2 connections made for other hosts that could carry an exchange for `key` (OkHttp's
    /// `isEligible`, spec §3.7), oldest first: direct, same port, TLS and TLS configuration
    /// ([`PoolKey::may_coalesce_with`]), connected to one of `resolved` (the addresses `key`'s
    /// host resolved to), accepting new exchanges with a free stream, and not barred from the
    /// host by a 421. The caller must still check that the connection's certificate covers the
    /// host, then take a stream with [`Self::acquire_id`].
    pub fn coalescing_candidates<'a>(
        &'a self,
        key: &'a PoolKey,
        resolved: &'a [IpAddr],
    ) -> impl Iterator<Item = PooledId> + 'a {
        let mut ids: Vec<u64> = self
            .entries
            .iter()
            .filter_map(move |(&id, e)| e.may_coalesce(key, resolved).then_some(id))
            .collect();
        ids.sort_unstable();
        ids.into_iter().map(PooledId)
    }

    /// Whether connection `id` is one of [`Self::coalescing_candidates`] for `key` and
    /// `resolved`, in one lookup.
    pub fn may_coalesce(&self, id: PooledId, key: &PoolKey, resolved: &[IpAddr]) -> bool {
        self.entries
            .get(&id.0)
            .is_some_and(|e| e.may_coalesce(key, resolved))
    }

    /// Counts one exchange against connection `id`, if it accepts one now (not marked, below
    /// its limit). Returns whether it did.
    pub fn acquire_id(&mut self, id: PooledId) -> bool {
        match self.entries.get_mut(&id.0) {
            Some(e) if !e.no_new_exchanges && e.allocations < e.limit => {
                e.allocations += 1;
                if !e.protocol.is_multiplexed()
                    && let Some(conns) = self.by_key.get_mut(&e.key)
                {
                    conns.idle.retain(|&(_, other)| other != id.0);
                }
                true
            }
            _ => false,
        }
    }

    /// Stops connection `id` from carrying `host`'s exchanges again (the host answered 421
    /// Misdirected Request over it, RFC 9110 §15.5.20). Returns whether the id is known.
    pub fn forbid_coalescing(&mut self, id: PooledId, host: &str) -> bool {
        match self.entries.get_mut(&id.0) {
            Some(e) => {
                if !e.not_for.iter().any(|h| h == host) {
                    e.not_for.push(host.to_owned());
                }
                true
            }
            None => false,
        }
    }

    /// The protocol connection `id` speaks.
    pub fn protocol(&self, id: PooledId) -> Option<Protocol> {
        self.entries.get(&id.0).map(|e| e.protocol)
    }

    /// Picks a connection for one exchange to `key` and counts the exchange against it.
    ///
    /// Prefers an HTTP/2 connection with a free stream (the oldest such), else the HTTP/1
    /// connection that became idle most recently. Skips connections marked with
    /// [`mark_no_new_exchanges`](Self::mark_no_new_exchanges), connections at their limit, and
    /// idle connections whose keep-alive has run out at `now` (the next
    /// [`cleanup`](Self::cleanup) closes those). Returns `None` when nothing is usable.
    pub fn acquire(&mut self, key: &PoolKey, now: Instant) -> Option<PooledId> {
        self.acquire_entry(key, now).map(|a| a.id)
    }

    /// [`Self::acquire`], handing back the connection and what a health check needs, in one
    /// lookup (the driver's hot path).
    pub fn acquire_entry(&mut self, key: &PoolKey, now: Instant) -> Option<Acquired<'_, C>> {
        let keep_alive = self.config.keep_alive;
        let conns = self.by_key.get_mut(key)?;
        let entries = &self.entries;
        let multiplexed = conns.multiplexed.iter().copied().find(|id| {
            entries.get(id).is_some_and(|e| {
                let expired = e.is_idle() && now - e.idle_since >= keep_alive;
                !e.no_new_exchanges && e.allocations < e.limit && !expired
            })
        });
        let id = match multiplexed {
            Some(id) => id,
            None => {
                // The top of the idle stack became idle last: if it has expired, all have.
                let &(since, top) = conns.idle.last()?;
                if now - since >= keep_alive {
                    return None;
                }
                conns.idle.pop();
                top
            }
        };
        let e = self.entries.get_mut(&id)?;
        debug_assert!(
            e.allocations < e.limit && !e.no_new_exchanges,
            "the idle stack holds only idle, unmarked connections"
        );
        let idle_since = (e.allocations == 0).then_some(e.idle_since);
        e.allocations += 1;
        Some(Acquired {
            id: PooledId(id),
            conn: &mut e.conn,
            idle_since,
            allocations: e.allocations,
        })
    }

    /// Ends one exchange on connection `id`.
    ///
    /// When its last exchange ends the connection becomes idle since `now`, or, if it was marked
    /// with [`mark_no_new_exchanges`](Self::mark_no_new_exchanges), leaves the pool and comes
    /// back as [`Release::Close`]. Unknown ids and connections without exchanges are ignored
    /// ([`Release::Ignored`]; [`Release::is_released`] gives the `bool`).
    pub fn release(&mut self, id: PooledId, now: Instant) -> Release<C> {
        self.release_with(id, now, |_| true)
    }

    /// [`Self::release`], first letting `check` look at the connection (and put back what the
    /// exchange held) in the same lookup. If `check` returns `false` the connection cannot
    /// carry another exchange: it leaves the pool at once and comes back as
    /// [`Release::Close`], whatever else it carries.
    pub fn release_with(
        &mut self,
        id: PooledId,
        now: Instant,
        check: impl FnOnce(&mut C) -> bool,
    ) -> Release<C> {
        let Some(e) = self.entries.get_mut(&id.0) else {
            return Release::Ignored;
        };
        if e.allocations == 0 {
            return Release::Ignored;
        }
        if !check(&mut e.conn) {
            return match self.take(id.0) {
                Some(conn) => Release::Close(conn),
                None => Release::Ignored,
            };
        }
        e.allocations -= 1;
        if e.allocations > 0 {
            return Release::Released;
        }
        if e.no_new_exchanges {
            return match self.take(id.0) {
                Some(conn) => Release::Close(conn),
                None => Release::Ignored,
            };
        }
        e.idle_since = now;
        if !e.protocol.is_multiplexed()
            && let Some(conns) = self.by_key.get_mut(&e.key)
        {
            // Keep the stack in idle order even if `now` went backwards (callers pass time
            // in): usually this is a push on top.
            let mut at = conns.idle.len();
            while at > 0 && conns.idle[at - 1].0 > now {
                at -= 1;
            }
            conns.idle.insert(at, (now, id.0));
        }
        Release::Released
    }

    /// Records a new stream limit from the peer's SETTINGS frame for HTTP/2 connection `id`.
    ///
    /// Unlike [`insert`](Self::insert), `0` is taken literally here: the peer allows no new
    /// streams. Exchanges already running above a lowered limit continue; no new ones are
    /// handed out until the count drops below it. HTTP/1 connections keep their limit of 1.
    /// Returns whether the id is known.
    pub fn set_max_streams(&mut self, id: PooledId, max_streams: u32) -> bool {
        let Some(e) = self.entries.get_mut(&id.0) else {
            return false;
        };
        if e.protocol.is_multiplexed() {
            e.limit = max_streams;
        }
        true
    }

    /// Stops connection `id` from being handed out again (for example after a GOAWAY or an I/O
    /// error). It is closed when its last exchange ends: [`release`](Self::release) returns it
    /// as [`Release::Close`]; if it is idle already, the next [`cleanup`](Self::cleanup) returns
    /// it. Returns whether the id is known.
    pub fn mark_no_new_exchanges(&mut self, id: PooledId) -> bool {
        match self.entries.get_mut(&id.0) {
            Some(e) => {
                e.no_new_exchanges = true;
                if let Some(conns) = self.by_key.get_mut(&e.key) {
                    conns.idle.retain(|&(_, other)| other != id.0);
                }
                true
            }
            None => false,
        }
    }

    /// How many exchanges `key`'s connections can carry at once, counting only connections
    /// that take new exchanges: each HTTP/2 connection's stream limit, 1 per HTTP/1
    /// connection (OkHttp's sum of allocation limits, for keeping connections warm).
    pub fn capacity(&self, key: &PoolKey) -> u64 {
        if !self.by_key.contains_key(key) {
            return 0;
        }
        self.entries
            .values()
            .filter(|e| e.key == *key && !e.no_new_exchanges)
            .map(|e| u64::from(e.limit))
            .sum()
    }

    /// Whether some HTTP/2 connection for `key` takes new exchanges, even if all its streams
    /// are in use now: a call that finds no free stream can wait for one.
    pub fn multiplexes(&self, key: &PoolKey) -> bool {
        self.by_key.get(key).is_some_and(|conns| {
            conns
                .multiplexed
                .iter()
                .any(|id| self.entries.get(id).is_some_and(|e| !e.no_new_exchanges))
        })
    }

    /// Whether connection `id` still takes new exchanges (not marked with
    /// [`Self::mark_no_new_exchanges`]); `None` if the id is unknown.
    pub fn takes_new_exchanges(&self, id: PooledId) -> Option<bool> {
        self.entries.get(&id.0).map(|e| !e.no_new_exchanges)
    }

    /// The handle of connection `id`.
    pub fn get(&self, id: PooledId) -> Option<&C> {
        self.entries.get(&id.0).map(|e| &e.conn)
    }

    /// The handle of connection `id`, mutably.
    pub fn get_mut(&mut self, id: PooledId) -> Option<&mut C> {
        self.entries.get_mut(&id.0).map(|e| &mut e.conn)
    }

    /// The key connection `id` serves.
    pub fn key(&self, id: PooledId) -> Option<&PoolKey> {
        self.entries.get(&id.0).map(|e| &e.key)
    }

    /// How many exchanges connection `id` carries now.
    pub fn allocations(&self, id: PooledId) -> Option<u32> {
        self.entries.get(&id.0).map(|e| e.allocations)
    }

    /// How many exchanges connection `id` may carry at once (1 for HTTP/1).
    pub fn allocation_limit(&self, id: PooledId) -> Option<u32> {
        self.entries.get(&id.0).map(|e| e.limit)
    }

    /// When connection `id` last became idle: its insertion, or the end of its last exchange.
    /// The value is kept while the connection is busy, so a caller that has just acquired its
    /// only exchange learns how long it sat unused (the idle-ping check of HTTP/2 health).
    pub fn idle_since(&self, id: PooledId) -> Option<Instant> {
        self.entries.get(&id.0).map(|e| e.idle_since)
    }

    /// Closes every idle connection at once (OkHttp's `evictAll`): they leave the pool and are
    /// handed back for closing. Connections carrying exchanges stay and finish them.
    pub fn evict_idle(&mut self) -> Vec<C> {
        let idle: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.is_idle())
            .map(|(&id, _)| id)
            .collect();
        let mut idle = idle;
        idle.sort_unstable();
        idle.into_iter().filter_map(|id| self.take(id)).collect()
    }

    /// Takes connection `id` out of the pool, whatever its state, and hands it back.
    pub fn remove(&mut self, id: PooledId) -> Option<C> {
        self.take(id.0)
    }

    /// How many connections the pool holds, in use or not.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the pool holds no connection.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many connections carry no exchange and may still be handed out (connections marked
    /// with [`mark_no_new_exchanges`](Self::mark_no_new_exchanges) are not counted).
    pub fn idle_count(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.is_idle() && !e.no_new_exchanges)
            .count()
    }

    /// Closes what must be closed at `now`, following OkHttp's `closeConnections(now)`.
    ///
    /// First, idle connections marked with
    /// [`mark_no_new_exchanges`](Self::mark_no_new_exchanges) are all returned. Then, among the
    /// other connections, the one idle the longest (the oldest insertion on ties) is evicted if
    /// it has been idle for at least the keep-alive, or if more than `max_idle` connections are
    /// idle. At most one connection is evicted per call; [`Cleanup::next_run`] says when to
    /// call again. Connections in use are never evicted.
    pub fn cleanup(&mut self, now: Instant) -> Cleanup<C> {
        let retired: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.is_idle() && e.no_new_exchanges)
            .map(|(&id, _)| id)
            .collect();
        let mut retired = retired;
        retired.sort_unstable();
        let mut closed: Vec<C> = retired.into_iter().filter_map(|id| self.take(id)).collect();

        let mut in_use = 0usize;
        let mut idle = 0usize;
        // (id, idle duration) of the connection idle the longest; on ties the oldest
        // insertion (smallest id), like OkHttp's scan in insertion order.
        let mut longest: Option<(u64, Duration)> = None;
        for (&id, e) in &self.entries {
            if !e.is_idle() {
                in_use += 1;
                continue;
            }
            idle += 1;
            let idle_for = now - e.idle_since;
            if longest.is_none_or(|(other, d)| idle_for > d || (idle_for == d && id < other)) {
                longest = Some((id, idle_for));
            }
        }

        let keep_alive = self.config.keep_alive;
        let next_run = match longest {
            Some((id, idle_for)) if idle_for >= keep_alive || idle > self.config.max_idle => {
                closed.extend(self.take(id));
                Some(Duration::ZERO)
            }
            Some((_, idle_for)) => Some(keep_alive - idle_for),
            None if in_use > 0 => Some(keep_alive),
            None => None,
        };
        Cleanup { closed, next_run }
    }

    /// Removes entry `id` from both indexes.
    fn take(&mut self, id: u64) -> Option<C> {
        let entry = self.entries.remove(&id)?;
        if let Some(conns) = self.by_key.get_mut(&entry.key) {
            if entry.protocol.is_multiplexed() {
                conns.multiplexed.retain(|&other| other != id);
            } else {
                conns.http1 -= 1;
                conns.idle.retain(|&(_, other)| other != id);
            }
            if conns.is_empty() {
                self.by_key.remove(&entry.key);
            }
        }
        Some(entry.conn)
    }
}
