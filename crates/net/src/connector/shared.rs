//! What every race of a connector shares ([`Inner`], behind the [`Connector`] handle): the
//! policy, resolver, TLS configurations, sockets, route memory, and the network reading.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastfallback_plan::{FallbackPolicy, FastFallbackExchangeFinder};
use fastfallback_proto::{DnsAnswer, QueryKind};
use fastfallback_route::{
    Connectivity, Lesson, Nat64Prefix, NetworkId, Proxy, RouteDatabase, SourceOf, SourceSelector,
};
use rustls::ClientConfig;
use rustls::client::danger::ServerCertVerifier;

use crate::memory_file::MemoryFile;
use crate::{Dial, KernelSources, NetworkState, Resolve, SocketOptions, detect_network};

use super::clock::*;

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
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) policy: Arc<FallbackPolicy>,
    pub(super) resolver: Arc<dyn Resolve>,
    pub(super) tls: Arc<ClientConfig>,
    /// The TLS configurations tried after `tls`, in order, when a handshake fails in a way
    /// another configuration can fix.
    pub(super) tls_fallbacks: Vec<Arc<ClientConfig>>,
    /// The configuration of QUIC attempts (`tls`, offering `h3`), when the policy races
    /// QUIC.
    #[cfg(feature = "quic")]
    pub(super) quic: Option<quinn::ClientConfig>,
    /// The certificate verifier inside `tls`, when the connector built it.
    pub(super) verifier: Option<Arc<dyn ServerCertVerifier>>,
    /// Encrypted Client Hello, when the TLS backend and configuration allow it.
    pub(super) ech: Option<crate::ech::Ech>,
    pub(super) socket: SocketOptions,
    pub(super) dialer: Option<Arc<dyn Dial>>,
    pub(super) sources: Sources,
    /// Set by the user, or `None` to read it from the kernel (cached briefly).
    pub(super) network: Option<NetworkState>,
    /// The last reading of the kernel's tables, and until when it is reused. Each thread
    /// keeps a copy too ([`LAST_READING`]), so that most connects take no lock to read it.
    pub(super) detected: Mutex<Option<(tokio::time::Instant, NetworkState)>>,
    /// This connector's number in the process ([`Inner::next_id`]): what a thread's copy of
    /// a network reading is kept under.
    pub(super) id: u64,
    /// The NAT64 prefix found through `ipv4only.arpa` (RFC 7050), or that there is none, and
    /// when.
    pub(super) nat64: Mutex<Option<(tokio::time::Instant, Option<Nat64Prefix>)>>,
    pub(super) db: Option<Arc<RouteDatabase>>,
    pub(super) memory_file: Option<Arc<MemoryFile>>,
    /// Proxies to fail over across, in order, for addresses that name none (empty: direct).
    pub(super) proxies: Vec<Proxy>,
    /// Seeds each race's random choices: a base plus a counter.
    pub(super) seed: u64,
    pub(super) races: AtomicU64,
}

/// Where sources come from: the kernel (with a cache the driver clears when the network
/// changes), or a user-supplied selector.
pub(super) enum Sources {
    Kernel(KernelSources),
    Custom(Box<dyn SourceSelector + Send + Sync>),
}

impl Sources {
    /// The source for each destination of `answer` as the race will see it
    /// ([`Connectivity::destinations`]), in one list.
    pub(super) fn find(&self, connectivity: &Connectivity, answer: &DnsAnswer) -> Vec<SourceOf> {
        let selector: &dyn SourceSelector = match self {
            Self::Kernel(k) => k,
            Self::Custom(c) => c.as_ref(),
        };
        let mut found = Vec::new();
        connectivity.for_each_destination(answer, |dst| {
            found.push(SourceOf {
                dst,
                source: selector.source_for(dst),
            });
        });
        found
    }
}

/// How long a NAT64 discovery (or the absence of a prefix) is kept. RFC 7050 §3.2 uses the
/// answer's TTL; [`Resolve`] hands over no TTL, so a fixed 10 minutes.
pub(super) const NAT64_TTL: Duration = Duration::from_secs(600);

/// How long a network reading is reused: long enough that a burst of connects reads the
/// kernel's tables once, short enough to notice a network change within seconds.
pub(super) const NETWORK_TTL: Duration = Duration::from_secs(5);

thread_local! {
    /// The calling thread's copy of one connector's last network reading: the connector's
    /// [`Inner::id`], until when the reading is reused, and the reading. A connect on the
    /// thread that read last takes no lock; any other reads the shared copy and keeps it.
    static LAST_READING: std::cell::Cell<Option<(u64, tokio::time::Instant, NetworkState)>> =
        const { std::cell::Cell::new(None) };
}

impl Inner {
    /// A number no other connector of the process has.
    pub(super) fn next_id() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The network at `now`: the one the user set, else the kernel's tables, read again
    /// once the last reading is [`NETWORK_TTL`] old.
    #[inline]
    pub(super) fn network(&self, now: tokio::time::Instant) -> NetworkState {
        if let Some(n) = self.network {
            return n;
        }
        if let Some((id, until, n)) = LAST_READING.get()
            && id == self.id
            && now < until
        {
            return n;
        }
        let (until, n) = self.shared_network(now);
        LAST_READING.set(Some((self.id, until, n)));
        n
    }

    /// [`Self::network`] from the copy every thread shares, read again when it is too old.
    fn shared_network(&self, now: tokio::time::Instant) -> (tokio::time::Instant, NetworkState) {
        let mut cached = self.detected.lock().unwrap_or_else(|p| p.into_inner());
        match *cached {
            Some((until, n)) if now < until => (until, n),
            previous => {
                let n = detect_network();
                if previous.is_some_and(|(_, p)| p.id != n.id)
                    && let Sources::Kernel(k) = &self.sources
                {
                    k.clear();
                }
                let until = now + NETWORK_TTL;
                *cached = Some((until, n));
                (until, n)
            }
        }
    }

    /// The network a race starts on: [`Self::network`], with the NAT64 prefix discovered when
    /// the host has IPv6 only and knows none (RFC 7050, HEv3 §8.1); and the instant the race
    /// starts (one clock reading serves both).
    pub(super) async fn network_for_race(&self) -> (NetworkState, tokio::time::Instant) {
        match self.network_at_start() {
            Ok(start) => start,
            Err(network) => self.with_nat64(network).await,
        }
    }

    /// [`Self::network_for_race`] without waiting: `Err` with the network when its NAT64
    /// prefix must be discovered first ([`Self::with_nat64`]). Most connects need no
    /// discovery, and then the caller has no future to build and poll.
    #[inline]
    pub(super) fn network_at_start(
        &self,
    ) -> Result<(NetworkState, tokio::time::Instant), NetworkState> {
        let t = reading();
        let network = self.network(t);
        if network.connectivity.needs_nat64_discovery() {
            return Err(network);
        }
        Ok((network, t))
    }

    /// `network` with its NAT64 prefix discovered, and the instant the race starts (after
    /// the discovery).
    pub(super) async fn with_nat64(
        &self,
        mut network: NetworkState,
    ) -> (NetworkState, tokio::time::Instant) {
        network.connectivity.nat64 = self.nat64_prefix().await;
        (network, reading())
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

    pub(super) fn next_seed(&self) -> u64 {
        let n = self.races.fetch_add(1, Ordering::Relaxed);
        self.seed.wrapping_add(n)
    }

    /// Applies a race's lessons to route memory, and saves the memory file now and then. With
    /// `keep`, the lessons are also copied there (a pool race hands them to its followers).
    ///
    /// Most races learn nothing (a loopback literal's never does): for them this is a check
    /// where it is called, not a call.
    #[inline]
    pub(super) fn learn(
        &self,
        network: NetworkId,
        finder: &mut FastFallbackExchangeFinder,
        keep: Option<&mut Vec<Lesson>>,
    ) {
        if let Some(db) = self.db.as_ref().filter(|_| finder.has_lessons()) {
            self.apply(db, network, finder, keep);
        }
    }

    /// [`Self::learn`] for a race that learned something.
    fn apply(
        &self,
        db: &Arc<RouteDatabase>,
        network: NetworkId,
        finder: &mut FastFallbackExchangeFinder,
        keep: Option<&mut Vec<Lesson>>,
    ) {
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
