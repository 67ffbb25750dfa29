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

use std::future::Future;
use std::io;
use std::sync::Arc;

use fastfallback_plan::FallbackPolicy;
use fastfallback_proto::{Phase, RaceError};
use fastfallback_route::{Address, AddressError, Lesson, Proxy, RouteDatabase, Zone};
use rustls::client::danger::ServerCertVerifier;

use crate::NetworkState;
use crate::link::{RaceEnd, RaceLink, Raced};

mod builder;
mod clock;
mod connection;
mod error;
mod race;
mod racing;
mod roots;
mod shared;
mod steps;
mod turn;

pub use builder::ConnectorBuilder;
pub use clock::now;
pub(crate) use clock::wall_secs;
pub use connection::Connection;
pub use error::{BuildError, ConnectError, RaceFailure};

use race::*;

pub use shared::Connector;

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

    /// Takes an `Alt-Svc` field value (RFC 7838 §3) from a response of `origin` into route
    /// memory: its HTTP/3 alternatives on the origin's own host are raced over QUIC by later
    /// connects to the origin on this network, while their `ma` runs and no HTTPS record
    /// says otherwise. A pool calls this for each response that carries the field.
    /// Only a connector that races QUIC ([`FallbackPolicy::quic`]) and has route memory
    /// keeps anything; returns whether it did (or forgot, for `clear`).
    pub fn learn_alt_svc(&self, origin: &Address, value: &str) -> bool {
        let Some(db) = self.inner.db.as_ref().filter(|_| self.inner.policy.quic) else {
            return false;
        };
        let reading = clock::reading();
        let network = self.inner.network(reading).id;
        let value = fastfallback_proto::parse_alt_svc(value);
        db.learn_alt_svc(network, origin, &value, clock::race_time(reading))
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
            let start = match self.inner.network_at_start() {
                Ok(start) => start,
                Err(network) => self.inner.with_nat64(network).await,
            };
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
///
/// Changed in place: most addresses have no zone name, and then nothing moves, and the check
/// is all a connect pays (inlined where it is called).
#[inline]
fn resolve_zone(address: &mut Address) -> Result<(), AddressError> {
    match address.zone() {
        Some(Zone::Name(_)) => resolve_zone_name(address),
        _ => Ok(()),
    }
}

/// [`resolve_zone`] for an address whose zone is an interface name.
fn resolve_zone_name(address: &mut Address) -> Result<(), AddressError> {
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
