//! [`Connector`]: runs the sans-IO race on tokio.
//!
//! The driver loop does four things, over and over:
//!
//! 1. if the race's timer has passed, fire it ([`FastFallbackExchangeFinder::handle_timeout`]);
//! 2. drain [`FastFallbackExchangeFinder::poll_output`] and act on it: send a query, start an
//!    attempt, drop a cancelled attempt (closing its socket in the same turn), or return;
//! 3. wait for the first of: a DNS answer, an attempt's progress, or the race's next deadline
//!    ([`FastFallbackExchangeFinder::poll_timeout`]);
//! 4. hand that event to the race with the current time. A DNS answer goes in with the source
//!    address of each destination, found here, outside the race ([`SourceSelector`]).
//!
//! Every query and attempt is a future owned by the connect future itself; nothing is spawned
//! while the race runs. Dropping the connect future therefore drops every attempt and closes
//! every socket it opened, at once; the race is abandoned and what it learned still reaches
//! route memory. Only after a win are the still-pending DNS queries handed to a task, until the
//! end of the DNS tail the race chose (HEv3 §6).
//!
//! Route memory: each race takes a [`fastfallback_route::MemoryView`] of its origin on the
//! current network when it starts, and its lessons are applied when it ends, under one lock.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use fastfallback_plan::{
    ConnectPlan, FallbackPolicy, FastFallbackExchangeFinder, MAX_MEMORY_TTL, PolicyError,
    RaceInput, SpareWinners,
};
use fastfallback_proto::{
    Alpn, AlpnOffer, AttemptError, AttemptEvent, AttemptId, CancelReason, DnsAnswer, Instant,
    Output, Phase, PooledId, Query, QueryKind, RaceError, Winner,
};
use fastfallback_route::{
    Address, AddressError, Connectivity, Host, Lesson, Nat64Prefix, NetworkId, Proxy,
    RouteDatabase, SourceOf, SourceSelector, Zone,
};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::{ClientConfig, RootCertStore};
use tokio::time::Sleep;

use crate::attempt::{TcpConnect, attempt_error, handshake};
use crate::events::{CallEvent, ConnectionEvent};
use crate::link::{Lease, Offer, RaceEnd, RaceLink, Raced, SpareEnd};
use crate::memory_file::MemoryFile;
use crate::report::{QueryLog, ReportError, Story};
use crate::{
    Answer, Dial, HickoryResolver, KernelSources, NetworkState, RaceReport, Resolve, ResolverError,
    SocketOptions, Stream, Transport, detect_network,
};

mod builder;
mod clock;
mod connection;
mod error;
mod race;
mod roots;
mod steps;
mod turn;

pub use builder::ConnectorBuilder;
pub use clock::now;
pub(crate) use clock::wall_secs;
pub use connection::Connection;
pub use error::{BuildError, ConnectError, RaceFailure};

use builder::*;
use clock::*;
use race::*;
use steps::*;

/// Opens the fastest working connection to an origin: Happy Eyeballs with route memory.
///
/// Cheap to clone; clones share the resolver, TLS configuration and route memory.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use fastfallback_net::Connector;
/// use tokio::io::AsyncWriteExt;
///
/// let connector = Connector::builder().build()?;
/// let mut conn = connector.connect("https://example.com").await?;
/// println!("{}", conn.report());
/// conn.write_all(b"GET / HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connector {
    inner: Arc<Inner>,
}

struct Inner {
    policy: Arc<FallbackPolicy>,
    resolver: Arc<dyn Resolve>,
    tls: Arc<ClientConfig>,
    /// The TLS configurations tried after `tls`, in order, when a handshake fails in a way
    /// another configuration can fix.
    tls_fallbacks: Vec<Arc<ClientConfig>>,
    /// The certificate verifier inside `tls`, when the connector built it.
    verifier: Option<Arc<dyn ServerCertVerifier>>,
    /// Encrypted Client Hello, when the TLS backend and configuration allow it.
    ech: Option<crate::ech::Ech>,
    socket: SocketOptions,
    dialer: Option<Arc<dyn Dial>>,
    sources: Sources,
    /// Set by the user, or `None` to read it from the kernel (cached briefly).
    network: Option<NetworkState>,
    /// The last reading of the kernel's tables, and until when it is reused.
    detected: Mutex<Option<(tokio::time::Instant, NetworkState)>>,
    /// The NAT64 prefix found through `ipv4only.arpa` (RFC 7050), or that there is none, and
    /// when.
    nat64: Mutex<Option<(tokio::time::Instant, Option<Nat64Prefix>)>>,
    db: Option<Arc<RouteDatabase>>,
    memory_file: Option<Arc<MemoryFile>>,
    /// Proxies to fail over across, in order, for addresses that name none (empty: direct).
    proxies: Vec<Proxy>,
    /// Seeds each race's random choices: a base plus a counter.
    seed: u64,
    races: AtomicU64,
}

/// Where sources come from: the kernel (with a cache the driver clears when the network
/// changes), or a user-supplied selector.
enum Sources {
    Kernel(KernelSources),
    Custom(Box<dyn SourceSelector + Send + Sync>),
}

impl Sources {
    fn find(&self, dsts: Vec<std::net::IpAddr>) -> Vec<SourceOf> {
        let selector: &dyn SourceSelector = match self {
            Self::Kernel(k) => k,
            Self::Custom(c) => c.as_ref(),
        };
        dsts.into_iter()
            .map(|dst| SourceOf {
                dst,
                source: selector.source_for(dst),
            })
            .collect()
    }
}

/// How long a NAT64 discovery (or the absence of a prefix) is kept. RFC 7050 §3.2 uses the
/// answer's TTL; [`Resolve`] hands over no TTL, so a fixed 10 minutes.
const NAT64_TTL: Duration = Duration::from_secs(600);

/// How long a network reading is reused: long enough that a burst of connects reads the
/// kernel's tables once, short enough to notice a network change within seconds.
const NETWORK_TTL: Duration = Duration::from_secs(5);

impl Inner {
    fn network(&self, now: tokio::time::Instant) -> NetworkState {
        if let Some(n) = self.network {
            return n;
        }
        let mut cached = self.detected.lock().unwrap_or_else(|p| p.into_inner());
        match *cached {
            Some((until, n)) if now < until => n,
            previous => {
                let n = detect_network();
                if previous.is_some_and(|(_, p)| p.id != n.id)
                    && let Sources::Kernel(k) = &self.sources
                {
                    k.clear();
                }
                *cached = Some((now + NETWORK_TTL, n));
                n
            }
        }
    }

    /// The network a race starts on: [`Self::network`], with the NAT64 prefix discovered when
    /// the host has IPv6 only and knows none (RFC 7050, HEv3 §8.1); and the instant the race
    /// starts (one clock reading serves both).
    async fn network_for_race(&self) -> (NetworkState, tokio::time::Instant) {
        let t = reading();
        let mut network = self.network(t);
        let c = &mut network.connectivity;
        if c.needs_nat64_discovery() {
            c.nat64 = self.nat64_prefix().await;
            return (network, reading());
        }
        (network, t)
    }

    /// Asks the resolver for `ipv4only.arpa` AAAA (RFC 7050 §3: sent to the network's own
    /// resolver, never answered locally) and reads the prefix from the answer; kept for
    /// [`NAT64_TTL`].
    async fn nat64_prefix(&self) -> Option<Nat64Prefix> {
        let now = tokio::time::Instant::now();
        if let Some((at, found)) = *self.nat64.lock().unwrap_or_else(|p| p.into_inner())
            && now.saturating_duration_since(at) < NAT64_TTL
        {
            return found;
        }
        let answer = self
            .resolver
            .query(Nat64Prefix::DISCOVERY_NAME, QueryKind::Aaaa)
            .await;
        let found = Nat64Prefix::discover_from(&answer);
        tracing::debug!(?found, "NAT64 prefix discovery (ipv4only.arpa)");
        *self.nat64.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, found));
        found
    }

    fn next_seed(&self) -> u64 {
        let n = self.races.fetch_add(1, Ordering::Relaxed);
        self.seed.wrapping_add(n)
    }

    /// Applies a race's lessons to route memory, and saves the memory file now and then. With
    /// `keep`, the lessons are also copied there (a pool race hands them to its followers).
    fn learn(
        &self,
        network: NetworkId,
        finder: &mut FastFallbackExchangeFinder,
        keep: Option<&mut Vec<Lesson>>,
    ) {
        let Some(db) = self.db.as_ref().filter(|_| finder.has_lessons()) else {
            return;
        };
        let (address, lessons) = finder.take_lessons();
        let learned = match keep {
            Some(keep) => {
                let start = keep.len();
                keep.extend(lessons);
                db.learn(network, address, keep[start..].iter().copied())
            }
            None => db.learn(network, address, lessons),
        };
        if learned && let Some(file) = &self.memory_file {
            MemoryFile::changed(file, db);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let (Some(file), Some(db)) = (&self.memory_file, &self.db)
            && let Err(e) = file.save_if_dirty(db)
        {
            tracing::warn!(path = %file.path.display(), error = %e, "cannot save route memory");
        }
    }
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("policy", &self.inner.policy)
            .field("socket", &self.inner.socket)
            .field("network", &self.inner.network)
            .field("route_memory", &self.inner.db.is_some())
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// A builder with every default.
    pub fn builder() -> ConnectorBuilder {
        ConnectorBuilder::default()
    }

    /// The policy races run with.
    pub fn policy(&self) -> &FallbackPolicy {
        &self.inner.policy
    }

    /// The route memory shared by this connector's races, if it has one.
    pub fn route_database(&self) -> Option<&Arc<RouteDatabase>> {
        self.inner.db.as_ref()
    }

    /// The network races run on now (read from the kernel unless set in the builder).
    pub fn network(&self) -> NetworkState {
        self.inner.network(tokio::time::Instant::now())
    }

    /// Writes route memory to the memory file now, if the connector has one.
    pub fn save_memory(&self) -> io::Result<()> {
        match (&self.inner.memory_file, &self.inner.db) {
            (Some(file), Some(db)) => file.save(db),
            _ => Ok(()),
        }
    }

    /// Races to `origin`: `https://host[:port]`, `http://host[:port]`, `tcp://host:port` or
    /// `host:port` (plain TCP). Must run inside a tokio runtime.
    pub async fn connect(&self, origin: &str) -> Result<Connection, ConnectError> {
        let address = Address::parse(origin).map_err(ConnectError::InvalidAddress)?;
        self.connect_to(address).await
    }

    /// Races to an already parsed address. Must run inside a tokio runtime.
    #[expect(
        clippy::manual_async_fn,
        reason = "an `async fn` would keep its argument twice in its future (see the body)"
    )]
    pub fn connect_to(
        &self,
        mut address: Address,
    ) -> impl Future<Output = Result<Connection, ConnectError>> + Send + '_ {
        // An async block rather than an `async fn`: an `async fn` keeps its argument and a
        // copy of it in every state of its future, and this block keeps one (72 bytes less
        // in every connect future, which callers move into their tasks).
        async move {
            if address.proxy().is_none() && !self.inner.proxies.is_empty() {
                // Boxed, so the failover's state does not make every connect future larger.
                return connection(Box::pin(self.race_routes(address, None)).await.0);
            }
            resolve_zone(&mut address).map_err(ConnectError::InvalidAddress)?;
            let start = self.inner.network_for_race().await;
            let mut race = Race::start(Arc::clone(&self.inner), address, None, start);
            connection(race.run().await)
        }
    }

    /// The proxies connects fail over across (empty: direct).
    pub fn proxies(&self) -> &[Proxy] {
        &self.inner.proxies
    }

    /// A race linked to a pool ([`crate::link`]): it may wait for another call's connect,
    /// takes connections offered mid-race, reports what it resolved, and hands over the
    /// attempts it kept after losing. Must run inside a tokio runtime.
    pub async fn race_linked(&self, address: Address, link: RaceLink) -> RaceEnd {
        let (result, lessons) = self.race_routes(address, Some(link)).await;
        RaceEnd { result, lessons }
    }

    /// Races to `address` directly, through its own proxy, or through each of the connector's
    /// proxies in turn until one works or fails for a reason the next cannot fix. Only the
    /// first race is linked to the pool. Returns the result and what every race taught route
    /// memory.
    async fn race_routes(
        &self,
        mut address: Address,
        mut link: Option<RaceLink>,
    ) -> (Result<Raced, ConnectError>, Vec<Lesson>) {
        if let Err(e) = resolve_zone(&mut address) {
            return (Err(ConnectError::InvalidAddress(e)), Vec::new());
        }
        // The common case, one race and no list to build.
        if address.proxy().is_some() || self.inner.proxies.is_empty() {
            let network = self.inner.network_for_race().await;
            let mut race = Race::start(Arc::clone(&self.inner), address, link, network);
            let result = race.run().await;
            return (result, race.lessons());
        }
        let routes: Vec<Address> = self
            .inner
            .proxies
            .iter()
            .map(|p| address.clone().with_proxy(p.clone()))
            .collect();
        let mut earlier = Vec::new();
        let mut lessons = Vec::new();
        let count = routes.len();
        for (i, route) in routes.into_iter().enumerate() {
            let more = i + 1 < count;
            let network = self.inner.network_for_race().await;
            let mut race = Race::start(Arc::clone(&self.inner), route, link.take(), network);
            let result = race.run().await;
            lessons.extend(race.lessons());
            match result {
                Err(ConnectError::Race(f)) if more && failed_at_proxy(&f.error) => earlier.push(*f),
                Err(ConnectError::Race(mut f)) => {
                    f.earlier = earlier;
                    return (Err(ConnectError::Race(f)), lessons);
                }
                other => return (other, lessons),
            }
        }
        (
            Err(ConnectError::Internal("an address with no route")),
            lessons,
        )
    }

    /// The certificate verifier of the TLS configuration, when the connector built it (a
    /// user's own `tls_config` hides it, and then connections are never coalesced).
    pub fn certificate_verifier(&self) -> Option<&Arc<dyn ServerCertVerifier>> {
        self.inner.verifier.as_ref()
    }

    /// A number that names this connector's TLS configuration, the same for its clones: a
    /// pool keys connections by it, so that connections made with one configuration are not
    /// handed to a connector with another.
    pub fn tls_identity(&self) -> u64 {
        Arc::as_ptr(&self.inner.tls) as usize as u64
    }
}

/// Whether a race through a proxy failed on the proxy's side, so another proxy may do
/// better: the proxy's name gave no address, the deadline passed, or every attempt failed in
/// TCP (to the proxy) or in the tunnel. A TLS failure is the origin's and stops the failover.
fn failed_at_proxy(error: &RaceError) -> bool {
    match error.kind {
        fastfallback_proto::RaceErrorKind::AllAttemptsFailed => error
            .attempts
            .iter()
            .all(|a| matches!(a.error.phase, Phase::Tcp | Phase::Tunnel)),
        _ => true,
    }
}

/// The connection a race outside the pool won.
fn connection(raced: Result<Raced, ConnectError>) -> Result<Connection, ConnectError> {
    match raced {
        Ok(Raced::Connected(c)) => Ok(c),
        // Only a race run for the pool is offered pooled connections.
        Ok(Raced::Pooled { .. }) => Err(ConnectError::Internal("pooled connections")),
        Err(e) => Err(e),
    }
}

/// Turns an interface name in a literal's zone into its index (RFC 4007 §11). The index is
/// read from the calling thread's network namespace (`/proc/thread-self/net/if_inet6`, which
/// lists every interface with IPv6, as a link-local zone needs).
/// Changed in place: most addresses have no zone name, and then nothing moves.
fn resolve_zone(address: &mut Address) -> Result<(), AddressError> {
    let Some(Zone::Name(name)) = address.zone() else {
        return Ok(());
    };
    let table = std::fs::read_to_string("/proc/thread-self/net/if_inet6").unwrap_or_default();
    let index = table
        .lines()
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            match (f.get(1), f.get(5)) {
                (Some(index), Some(dev)) if dev == name => u32::from_str_radix(index, 16).ok(),
                _ => None,
            }
        })
        .ok_or_else(|| AddressError::UnknownInterface(name.clone()))?;
    *address = address.clone().with_zone(Zone::Index(index));
    Ok(())
}

#[cfg(test)]
mod tests;
