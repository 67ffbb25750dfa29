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
use crate::memory_file::MemoryFile;
use crate::report::{QueryLog, ReportError, Story};
use crate::{
    Answer, Dial, HickoryResolver, KernelSources, NetworkState, RaceReport, Resolve, ResolverError,
    SocketOptions, Stream, Transport, detect_network,
};

/// Route memory may have to express times up to a day before this process started (a memory
/// file written yesterday), so the race clock starts that long before the first connect.
const CLOCK_BASE: Duration = MAX_MEMORY_TTL;

/// The clock every race of the process shares, so route memory written by one connector's
/// race can be read by another's.
fn epoch() -> tokio::time::Instant {
    static EPOCH: OnceLock<tokio::time::Instant> = OnceLock::new();
    *EPOCH.get_or_init(tokio::time::Instant::now)
}

pub(crate) fn now() -> Instant {
    race_time(reading())
}

/// A reading of tokio's clock (which follows tokio's paused time). The race clock's epoch is
/// fixed first if it was not yet: a reading turned into the race clock later, by a report,
/// must not come before the epoch, where it would read as the epoch itself.
fn reading() -> tokio::time::Instant {
    epoch();
    tokio::time::Instant::now()
}

/// The race clock's instant for a [`reading`].
pub(crate) fn race_time(reading: tokio::time::Instant) -> Instant {
    let elapsed = reading.saturating_duration_since(epoch());
    Instant::from_elapsed(CLOCK_BASE + elapsed)
}

/// One reading of the clock, turned into the race clock's [`Instant`] only when something
/// asks for it, and then once.
///
/// The turning costs about twice the reading (std's `Instant` subtraction), so a wake-up that
/// the race does not need to hear of (the first poll of an attempt that is still pending)
/// never pays for it.
#[derive(Clone, Copy)]
struct Moment {
    reading: tokio::time::Instant,
    at: Option<Instant>,
}

impl Moment {
    /// The clock now.
    fn now() -> Self {
        Self::of(reading())
    }

    fn of(reading: tokio::time::Instant) -> Self {
        Self { reading, at: None }
    }

    /// The race clock's instant for this reading.
    fn at(&mut self) -> Instant {
        *self.at.get_or_insert_with(|| race_time(self.reading))
    }
}

fn tokio_instant(at: Instant) -> tokio::time::Instant {
    epoch() + at.elapsed().saturating_sub(CLOCK_BASE)
}

pub(crate) fn wall_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

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

/// Which certificates a connector trusts.
#[derive(Default)]
enum Roots {
    /// The webpki root set (Mozilla's).
    #[default]
    Webpki,
    /// The caller's roots.
    Custom(RootCertStore),
    /// The operating system's verifier.
    #[cfg(feature = "platform-verifier")]
    Platform,
}

/// rustls's crypto provider: the process-wide one if the application installed one, else the
/// backend this crate was built with (`aws-lc-rs` by default, or `ring`). Its random
/// generator is warmed up first ([`warm_up`]).
fn crypto_provider() -> Result<Arc<rustls::crypto::CryptoProvider>, BuildError> {
    let provider = chosen_provider()?;
    warm_up(&provider);
    Ok(provider)
}

/// Set once the first connector of the process warmed its provider up.
static WARMED: std::sync::Once = std::sync::Once::new();

/// Draws from the provider's random generator once per process, while the connector is
/// built: aws-lc sets its generator up on the first draw, which took 45 ms here (the next
/// draw 2 µs). Left to the first handshake, that time would be reported as TLS.
fn warm_up(provider: &rustls::crypto::CryptoProvider) {
    WARMED.call_once(|| {
        let _ = provider.secure_random.fill(&mut [0u8; 1]);
    });
}

fn chosen_provider() -> Result<Arc<rustls::crypto::CryptoProvider>, BuildError> {
    if let Some(provider) = rustls::crypto::CryptoProvider::get_default() {
        return Ok(Arc::clone(provider));
    }
    #[cfg(feature = "aws-lc-rs")]
    return Ok(Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    #[cfg(all(feature = "ring", not(feature = "aws-lc-rs")))]
    return Ok(Arc::new(rustls::crypto::ring::default_provider()));
    #[cfg(not(any(feature = "aws-lc-rs", feature = "ring")))]
    Err(BuildError::Tls(rustls::Error::General(
        "no TLS crypto provider: enable the `aws-lc-rs` or `ring` feature, or install one with \
         rustls::crypto::CryptoProvider::install_default"
            .to_owned(),
    )))
}

/// Builds a [`Connector`]. Every setting has a default: the system's DNS configuration,
/// the webpki root certificates, [`FallbackPolicy::default`] and [`SocketOptions::default`].
#[derive(Default)]
#[must_use]
pub struct ConnectorBuilder {
    policy: FallbackPolicy,
    resolver: Option<Arc<dyn Resolve>>,
    roots: Roots,
    tls: Option<ClientConfig>,
    tls_fallbacks: Vec<ClientConfig>,
    ech_grease: bool,
    socket: SocketOptions,
    dialer: Option<Arc<dyn Dial>>,
    sources: Option<Box<dyn SourceSelector + Send + Sync>>,
    connectivity: Option<Connectivity>,
    network_id: Option<NetworkId>,
    db: Option<Arc<RouteDatabase>>,
    memory_file: Option<PathBuf>,
    proxies: Vec<Proxy>,
    seed: Option<u64>,
}

impl ConnectorBuilder {
    /// The race policy. It is validated by [`Self::build`].
    pub fn policy(mut self, policy: FallbackPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The DNS resolver (default: [`HickoryResolver::from_system_conf`]).
    pub fn resolver(mut self, resolver: impl Resolve) -> Self {
        self.resolver = Some(Arc::new(resolver));
        self
    }

    /// Trust these roots instead of the webpki set (for private CAs and tests). To add a CA
    /// from PEM to the webpki set instead: [`Self::add_root_pem`].
    pub fn root_certificates(mut self, roots: RootCertStore) -> Self {
        self.roots = Roots::Custom(roots);
        self
    }

    /// Verify certificates with the operating system's verifier (rustls-platform-verifier:
    /// the system trust store, with its revocation and policy checks) instead of the webpki
    /// roots. Replaces [`Self::root_certificates`].
    #[cfg(feature = "platform-verifier")]
    pub fn platform_verifier(mut self) -> Self {
        self.roots = Roots::Platform;
        self
    }

    /// A complete rustls configuration, replacing roots and defaults. If it names ALPN ids,
    /// they are what every attempt offers (h2 and/or http/1.1; anything else is a build
    /// error), and a policy asking for another offer is a build error; if it names none, the
    /// policy's [`FallbackPolicy::alpn`] is offered. HTTP/2 coalescing needs the connector's
    /// own verifier, so connections made with a custom configuration are never coalesced.
    pub fn tls_config(mut self, config: ClientConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// A TLS configuration to try after the first one (and after earlier fallbacks), on the
    /// same route, when a handshake fails with an alert another configuration can fix: the
    /// server refused the protocol version (`protocol_version`), found no common parameters
    /// (`handshake_failure`, `insufficient_security`), or speaks no version or suite we offer.
    /// Never after a certificate error. rustls speaks nothing below TLS 1.2, so no fallback
    /// can go lower. Each fallback offers the same ALPN ids as the first configuration; it
    /// should verify certificates as the first one does (coalescing uses the first one's
    /// verifier). The report's `tls_config` says which configuration an attempt used.
    pub fn tls_fallback(mut self, config: ClientConfig) -> Self {
        self.tls_fallbacks.push(config);
        self
    }

    /// Options set on every socket before it connects.
    pub fn socket_options(mut self, options: SocketOptions) -> Self {
        self.socket = options;
        self
    }

    /// Opens each attempt's transport with `dialer` instead of a TCP connect (see [`Dial`]).
    pub fn dialer(mut self, dialer: impl Dial) -> Self {
        self.dialer = Some(Arc::new(dialer));
        self
    }

    /// Finds RFC 6724 source addresses with `sources` instead of asking the kernel (for
    /// example a [`fastfallback_route::HostModel`] in tests).
    pub fn sources(mut self, sources: impl SourceSelector + Send + Sync + 'static) -> Self {
        self.sources = Some(Box::new(sources));
        self
    }

    /// Which families the host can use and its NAT64 prefix (default: read from the kernel
    /// with [`crate::detect_network`] and re-read every few seconds, HEv3 §4.1). Setting it
    /// also fixes the network identity, to [`Self::network_id`] or `NetworkId(0)`.
    pub fn connectivity(mut self, connectivity: Connectivity) -> Self {
        self.connectivity = Some(connectivity);
        self
    }

    /// The network identity route memory is kept under, when [`Self::connectivity`] is set.
    pub fn network_id(mut self, id: NetworkId) -> Self {
        self.network_id = Some(id);
        self
    }

    /// Share route memory with other connectors (default: a new one per connector, sized by
    /// the policy's [`fastfallback_route::RouteMemory`]; none if the policy turns it off).
    pub fn route_database(mut self, db: Arc<RouteDatabase>) -> Self {
        self.db = Some(db);
        self
    }

    /// Keep route memory in `path` across processes: it is loaded at build (a corrupt,
    /// truncated, foreign or oversized file is ignored with a warning) and saved atomically
    /// with mode 0600, at most every 10 s after races that learned something, and when the
    /// last clone of the connector is dropped. A path that cannot be used fails the build
    /// with [`BuildError::MemoryFile`]: a directory that is missing or cannot be written, or
    /// something other than a regular file (a FIFO is never read). Opt-in; no peer has it.
    pub fn memory_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.memory_file = Some(path.into());
        self
    }

    /// Connects through `proxy` (call it again to add more, in order of preference): each
    /// connect races the proxy's addresses, and when the race through one proxy fails on the
    /// proxy's side (its name did not resolve, or every attempt failed in TCP or in the
    /// tunnel), the next proxy is tried, as OkHttp's `RouteSelector` does. An address that
    /// names its own proxy ([`Address::with_proxy`]) uses only that one. Pooled connections
    /// through proxies are keyed by them and never coalesced.
    pub fn proxy(mut self, proxy: Proxy) -> Self {
        self.proxies.push(proxy);
        self
    }

    /// Sends a GREASE Encrypted Client Hello extension on TLS attempts whose HTTPS records
    /// carry no ECH configuration (draft-ietf-tls-esni §6.2), so that ECH traffic does not
    /// stand out. Off by default: rustls offers only TLS 1.3 in a ClientHello with ECH, so a
    /// server that speaks only TLS 1.2 fails the handshake (with a [`Self::tls_fallback`]
    /// configuration, its version alert falls back to that one, without GREASE).
    ///
    /// Attempts whose service carries an `ech` configuration use real ECH whatever this says
    /// ([`FallbackPolicy::ech`]). Neither works with a caller's own [`Self::tls_config`] or
    /// without the `aws-lc-rs` feature, which brings HPKE.
    pub fn ech_grease(mut self, grease: bool) -> Self {
        self.ech_grease = grease;
        self
    }

    /// Seeds the races' random choices, for repeatable runs (default: random per connector).
    pub fn rng_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Checks the settings and builds the connector.
    pub fn build(self) -> Result<Connector, BuildError> {
        let mut policy = self.policy;
        policy.validate().map_err(BuildError::Policy)?;
        let resolver = match self.resolver {
            Some(r) => r,
            None => Arc::new(HickoryResolver::from_system_conf().map_err(BuildError::Resolver)?),
        };
        let (mut tls, verifier, provider) = match self.tls {
            Some(c) => (c, None, None),
            None => {
                let provider = crypto_provider()?;
                // The verifier is kept, so the pool can ask it whether a connection's
                // certificate also covers another host before coalescing (§3.7).
                let verifier: Arc<dyn ServerCertVerifier> = match self.roots {
                    Roots::Webpki | Roots::Custom(_) => {
                        let roots = match self.roots {
                            Roots::Custom(roots) => roots,
                            _ => webpki_roots::TLS_SERVER_ROOTS.iter().cloned().collect(),
                        };
                        WebPkiServerVerifier::builder_with_provider(
                            Arc::new(roots),
                            provider.clone(),
                        )
                        .build()
                        .map_err(|e| BuildError::Tls(rustls::Error::General(e.to_string())))?
                    }
                    #[cfg(feature = "platform-verifier")]
                    Roots::Platform => Arc::new(
                        rustls_platform_verifier::Verifier::new(provider.clone())
                            .map_err(BuildError::Tls)?,
                    ),
                };
                let config = ClientConfig::builder_with_provider(Arc::clone(&provider))
                    .with_safe_default_protocol_versions()
                    .map_err(BuildError::Tls)?
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::clone(&verifier))
                    .with_no_client_auth();
                (config, Some(verifier), Some(provider))
            }
        };
        // ALPN offers what the client speaks. A configuration that names its own ALPN ids is
        // taken at its word (never overwritten); a policy that asks for something else is an
        // error rather than a silent choice.
        if !tls.alpn_protocols.is_empty() {
            let offer = AlpnOffer::from_ids(&tls.alpn_protocols).ok_or_else(|| {
                BuildError::Alpn(format!(
                    "the TLS configuration offers {:?}; this engine speaks h2 and http/1.1 over TCP",
                    tls.alpn_protocols
                        .iter()
                        .map(|id| String::from_utf8_lossy(id).into_owned())
                        .collect::<Vec<_>>()
                ))
            })?;
            if policy.alpn != AlpnOffer::default() && policy.alpn != offer {
                return Err(BuildError::Alpn(format!(
                    "the policy offers {:?} but the TLS configuration offers {offer:?}",
                    policy.alpn
                )));
            }
            policy.alpn = offer;
        }
        // In the engine's order (h2 first), so each attempt uses this configuration as is.
        tls.alpn_protocols = policy
            .alpn
            .ids()
            .iter()
            .map(|a| a.as_bytes().to_vec())
            .collect();
        let tls_fallbacks = self
            .tls_fallbacks
            .into_iter()
            .map(|mut c| {
                c.alpn_protocols.clone_from(&tls.alpn_protocols);
                Arc::new(c)
            })
            .collect();
        let ech = match (provider, &verifier) {
            (Some(provider), Some(verifier)) => crate::ech::Ech::new(
                provider,
                Arc::clone(verifier),
                tls.alpn_protocols.clone(),
                self.ech_grease,
            )
            .map_err(BuildError::Tls)?,
            _ => None,
        };
        policy.ech &= ech.is_some();
        let db = match self.db {
            Some(db) => Some(db),
            None if policy.route_memory.enabled => {
                Some(Arc::new(RouteDatabase::new(policy.route_memory)))
            }
            None => None,
        };
        let memory_file = match (&db, self.memory_file) {
            (Some(db), Some(path)) => Some(Arc::new(
                MemoryFile::open(path, db).map_err(BuildError::MemoryFile)?,
            )),
            _ => None,
        };
        let sources = match self.sources {
            Some(s) => Sources::Custom(s),
            None => Sources::Kernel(KernelSources::new(&self.socket)),
        };
        let network = self.connectivity.map(|connectivity| NetworkState {
            connectivity,
            id: self.network_id.unwrap_or_default(),
        });
        let seed = self.seed.unwrap_or_else(|| {
            // The standard library's per-process random keys: no RNG dependency needed.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(wall_secs());
            h.finish()
        });
        Ok(Connector {
            inner: Arc::new(Inner {
                policy: Arc::new(policy),
                resolver,
                tls: Arc::new(tls),
                tls_fallbacks,
                verifier,
                ech,
                socket: self.socket,
                dialer: self.dialer,
                sources,
                network,
                // Read the network now, so the first connect does not pay for it.
                nat64: Mutex::new(None),
                detected: Mutex::new(
                    network
                        .is_none()
                        .then(|| (tokio::time::Instant::now() + NETWORK_TTL, detect_network())),
                ),
                db,
                memory_file,
                proxies: self.proxies,
                seed,
                races: AtomicU64::new(0),
            }),
        })
    }
}

/// Why a [`Connector`] could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The policy is invalid.
    Policy(PolicyError),
    /// The system DNS configuration could not be read.
    Resolver(ResolverError),
    /// The TLS configuration was rejected.
    Tls(rustls::Error),
    /// The ALPN settings cannot be met: ids the engine does not speak, or a policy and a TLS
    /// configuration that disagree.
    Alpn(String),
    /// The route-memory file's path cannot be used: its directory is missing or cannot be
    /// written, it is not a regular file (a FIFO, a device, a directory), or it cannot be
    /// read. (A file that is merely corrupt is not an error: it is ignored with a warning and
    /// replaced.)
    MemoryFile(io::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Policy(e) => write!(f, "invalid policy: {e}"),
            Self::Resolver(e) => write!(f, "{e}"),
            Self::Tls(e) => write!(f, "invalid TLS configuration: {e}"),
            Self::Alpn(e) => write!(f, "ALPN: {e}"),
            Self::MemoryFile(e) => write!(f, "route-memory file {e}"),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Policy(e) => Some(e),
            Self::Resolver(e) => Some(e),
            Self::Tls(e) => Some(e),
            Self::MemoryFile(e) => Some(e),
            Self::Alpn(_) => None,
        }
    }
}

/// Why a connect failed. Race failures carry the full report.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The origin is not a valid address (bad name, port 0, unsupported scheme…).
    InvalidAddress(AddressError),
    /// The race ran and lost: every cause is inside, in start order.
    Race(Box<RaceFailure>),
    /// Something this driver does not do (named).
    Unsupported(&'static str),
    /// One of the driver's own invariants broke (named): a bug in this crate, not a network
    /// or input problem. Please report it.
    Internal(&'static str),
}

/// A lost race: why, and everything that happened.
#[derive(Clone, Debug)]
pub struct RaceFailure {
    /// Why the race failed, with every attempt's cause.
    pub error: RaceError,
    /// The race's report.
    pub report: RaceReport,
    /// When the connector fails over across proxies: the races through the proxies tried
    /// before this one, in order.
    pub earlier: Vec<Self>,
}

impl ConnectError {
    /// The race's report, if a race ran.
    pub fn report(&self) -> Option<&RaceReport> {
        match self {
            Self::Race(r) => Some(&r.report),
            _ => None,
        }
    }

    /// The race error, if a race ran.
    pub fn race_error(&self) -> Option<&RaceError> {
        match self {
            Self::Race(r) => Some(&r.error),
            _ => None,
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidAddress(e) => write!(f, "invalid origin: {e}"),
            Self::Race(r) => {
                write!(f, "cannot connect to {}: {}", r.report.origin, r.error)?;
                for (i, earlier) in r.earlier.iter().enumerate() {
                    let through = earlier
                        .report
                        .attempts
                        .first()
                        .and_then(|a| a.proxy.as_deref())
                        .unwrap_or("an earlier proxy");
                    write!(
                        f,
                        "; before that, through {through} (proxy {}): {}",
                        i + 1,
                        earlier.error.kind
                    )?;
                }
                Ok(())
            }
            Self::Unsupported(what) => write!(f, "not supported by this driver yet: {what}"),
            Self::Internal(what) => write!(
                f,
                "internal error in fastfallback (a bug, please report it): {what}"
            ),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidAddress(e) => Some(e),
            Self::Race(r) => Some(&r.error),
            Self::Unsupported(_) | Self::Internal(_) => None,
        }
    }
}

impl From<ConnectError> for io::Error {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::Race(r) => Self::from(r.error),
            ConnectError::InvalidAddress(a) => Self::new(io::ErrorKind::InvalidInput, a),
            ConnectError::Unsupported(_) => Self::new(io::ErrorKind::Unsupported, e),
            ConnectError::Internal(_) => Self::other(e),
        }
    }
}

/// The winner of a race: a connected stream, and the story of how it was found.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
    /// Holds the peer address and ALPN too, so they are not kept twice: a `Connection` of
    /// 128 bytes moves without a call to `memcpy`.
    story: Story,
    /// Boxed: most connections are never asked for their report, and a small `Connection`
    /// is cheap to move.
    report: OnceLock<Box<RaceReport>>,
}

impl Connection {
    /// The race's report, formatted on first use (a connect that nobody asks about never pays
    /// for formatting it).
    pub fn report(&self) -> &RaceReport {
        self.report.get_or_init(|| Box::new(self.story.report()))
    }

    /// The address the winner connected to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.story.peer()
    }

    /// The protocol ALPN chose, if TLS negotiated one.
    pub fn alpn(&self) -> Option<&Alpn> {
        self.story.alpn()
    }

    /// The stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Takes the stream and the report apart.
    pub fn into_parts(self) -> (Stream, RaceReport) {
        let report = match self.report.into_inner() {
            Some(r) => *r,
            None => self.story.report(),
        };
        (self.stream, report)
    }

    /// Takes the stream, dropping the report.
    pub fn into_stream(self) -> Stream {
        self.stream
    }

    /// The stream and the story, unformatted (the pool keeps the story for its exchange's
    /// report; the story also has the peer address and ALPN).
    pub(crate) fn into_raw(self) -> (Stream, Story) {
        (self.stream, self.story)
    }
}

impl tokio::io::AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

type StepFuture<T> = Pin<Box<dyn Future<Output = Result<T, AttemptError>> + Send>>;

/// What an attempt does after its TCP handshake: the proxy tunnel when its route has a proxy,
/// then TLS when its plan has it. Built when TCP connects, from the plan.
struct AfterTcp {
    config: Arc<ClientConfig>,
    tls: Option<Arc<fastfallback_plan::TlsStep>>,
    tunnel: Option<Tunnel>,
}

/// A tunnel to open: through this proxy, to this origin host and port, resolving with this
/// resolver when the proxy wants an address.
struct Tunnel {
    proxy: Arc<Proxy>,
    host: Host,
    port: u16,
    resolver: Arc<dyn Resolve>,
}

impl AfterTcp {
    fn new(inner: &Inner, origin: &Address, plan: &ConnectPlan) -> Self {
        let config = match plan.tls.as_ref().map_or(0, |t| t.config) {
            0 => &inner.tls,
            n => inner.tls_fallbacks.get(n - 1).unwrap_or(&inner.tls),
        };
        let config = match (plan.tls.as_deref(), &inner.ech) {
            (
                Some(fastfallback_plan::TlsStep {
                    ech: Some(list), ..
                }),
                Some(ech),
            ) => {
                ech.config(list).unwrap_or_else(|e| {
                    // No configuration in the list is one rustls can use: connect as a
                    // client without ECH would.
                    tracing::warn!(error = %e, "unusable ECH configuration; connecting without ECH");
                    Arc::clone(config)
                })
            }
            (
                Some(fastfallback_plan::TlsStep {
                    ech: None,
                    config: 0,
                    ..
                }),
                Some(ech),
            ) => Arc::clone(ech.grease().unwrap_or(config)),
            _ => Arc::clone(config),
        };
        Self {
            config,
            tls: plan.tls.clone(),
            tunnel: plan
                .route
                .proxy
                .clone()
                .filter(|_| plan.tunnel)
                .map(|proxy| Tunnel {
                    proxy,
                    host: origin.host().clone(),
                    port: origin.port(),
                    resolver: Arc::clone(&inner.resolver),
                }),
        }
    }

    async fn run(self, transport: Transport) -> Result<(Stream, Option<Alpn>), AttemptError> {
        let transport = match self.tunnel {
            Some(t) => t.open(transport).await?,
            None => transport,
        };
        match &self.tls {
            Some(step) => handshake(transport, step, &self.config).await,
            None => Ok((Stream::Plain(transport), None)),
        }
    }
}

impl Tunnel {
    /// Opens the tunnel over `transport`, connected to the proxy.
    async fn open(self, transport: Transport) -> Result<Transport, AttemptError> {
        let Self {
            proxy,
            host,
            port,
            resolver,
        } = self;
        crate::proxy::open(transport, &proxy, &host, port, resolver.as_ref()).await
    }
}

/// The transport step of an attempt: the default TCP connect (a plain future, no box), or a
/// user's [`Dial`](crate::Dial).
enum TcpStep {
    /// The default connect, not started: the socket opens when the driver first polls it, so
    /// an attempt cancelled in the turn that started it (a pooled connection came first)
    /// never sends a SYN.
    Unstarted(SocketAddr),
    Direct(TcpConnect),
    Dialed(crate::attempt::Dialing),
}

impl TcpStep {
    /// Opens the socket of an unstarted default connect.
    fn start(&mut self, options: &SocketOptions) {
        if let Self::Unstarted(target) = *self {
            *self = Self::Direct(TcpConnect::start(target, options));
        }
    }

    fn poll_step(
        &mut self,
        cx: &mut Context<'_>,
        options: &SocketOptions,
    ) -> Poll<Result<Transport, AttemptError>> {
        self.start(options);
        Pin::new(self).poll(cx)
    }
}

impl Future for TcpStep {
    type Output = Result<Transport, AttemptError>;

    /// Polls a started step ([`TcpStep::start`] comes first).
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Direct(f) => Pin::new(f).poll(cx),
            Self::Dialed(f) => f
                .as_mut()
                .poll(cx)
                .map_err(|e| attempt_error(&e, Phase::Tcp, "connect")),
            Self::Unstarted(_) => Poll::Ready(Err(attempt_error(
                &io::Error::other("polled before it started"),
                Phase::Tcp,
                "connect",
            ))),
        }
    }
}

/// The step an attempt is in: each is one future, dropped to cancel.
enum Step {
    Tcp(TcpStep),
    /// TCP to the proxy is connected; the tunnel to the origin is being opened.
    Tunnel(StepFuture<Transport>),
    /// TCP is done and the plan holds TLS until the race says [`Output::ResumeAttempt`]
    /// (boxed: rare, and it keeps every running attempt small).
    Held(Option<Box<Transport>>),
    Tls(StepFuture<(Stream, Option<Alpn>)>),
}

/// An attempt in flight. Its plan is the race's record of it
/// ([`FastFallbackExchangeFinder::attempt`]): the driver keeps no copy, so a running attempt
/// is small enough to move without a call.
struct Running {
    id: AttemptId,
    step: Step,
    /// The attempt's tracing span, entered whenever its step is polled.
    span: Option<Box<tracing::Span>>,
}

enum Wake {
    Dns(Query, DnsAnswer),
    Tcp(usize, Result<Transport, AttemptError>),
    Tunnel(usize, Result<Transport, AttemptError>),
    Tls(usize, Result<(Stream, Option<Alpn>), AttemptError>),
    Offer(Offer),
    Timer,
}

#[cfg(feature = "http")]
use crate::pool::PoolLease;

/// Without the `http` feature there is no pool, so no lease can exist.
#[cfg(not(feature = "http"))]
pub(crate) enum PoolLease {}

#[cfg(not(feature = "http"))]
impl PoolLease {
    pub(crate) fn id(&self) -> PooledId {
        match *self {}
    }
}

/// What a race run for the pool hears from it while it runs.
pub(crate) enum Offer {
    /// A pooled connection with an exchange already reserved for this race (dropping the
    /// lease gives it back).
    Pooled(PoolLease),
    /// The connect this (waiting) race followed ended without a connection to share; what it
    /// taught route memory.
    Release(Vec<Lesson>),
}

/// Where a race run for the pool reports what it resolved, so the pool can offer a connection
/// it may coalesce (spec/okhttp-connection-layer.md §3.7), and hands over the attempts it
/// kept after losing (`SpareWinners::Pool`).
pub(crate) trait Watch: Send + Sync {
    /// The race now knows these addresses of its origin.
    fn resolved(&self, addresses: &[std::net::IpAddr]);
    /// An attempt that lost the race but was kept: it finishes in the background and, if it
    /// connects, may be pooled.
    fn adopt(&self, spare: Spare);
}

/// A losing attempt kept to finish on its own.
pub(crate) type Spare = Pin<Box<dyn Future<Output = SpareEnd> + Send>>;

/// How a kept attempt ended: its id and route, and its stream with what ALPN chose, or `None`
/// if it failed or ran past the attempt timeout.
pub(crate) struct SpareEnd {
    pub(crate) attempt: AttemptId,
    pub(crate) route: SocketAddr,
    pub(crate) connected: Option<(Stream, Option<Alpn>)>,
}

/// How a race run for the pool is wired to it.
pub(crate) struct PoolLink {
    /// Start [`fastfallback_plan::RacePhase::Waiting`] (single flight).
    pub(crate) waiting: bool,
    /// Who hears the race's DNS queries and attempts.
    pub(crate) listeners: crate::events::Listeners,
    pub(crate) offers: tokio::sync::mpsc::UnboundedReceiver<Offer>,
    pub(crate) watch: Option<Arc<dyn Watch>>,
}

/// How a race run for the pool ended.
pub(crate) enum Raced {
    /// It connected: a new connection.
    Connected(Connection),
    /// It ended on a pooled connection the pool offered (an exchange is reserved on it). The
    /// lease is boxed, so this rare outcome makes the result no larger than a `Connection`.
    Pooled { lease: Box<PoolLease>, story: Story },
}

/// Everything a race run for the pool hands back, whatever its outcome.
pub(crate) struct RaceEnd {
    pub(crate) result: Result<Raced, ConnectError>,
    /// What the race taught route memory (for the calls that waited on it).
    pub(crate) lessons: Vec<Lesson>,
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

    /// A race run for the pool: it may wait for another call's connect, takes pooled
    /// connections offered mid-race, and reports what it resolved.
    pub(crate) async fn race_for_pool(&self, address: Address, link: PoolLink) -> RaceEnd {
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
        mut link: Option<PoolLink>,
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
    pub(crate) fn verifier(&self) -> Option<&Arc<dyn ServerCertVerifier>> {
        self.inner.verifier.as_ref()
    }

    /// A number that names this connector's TLS configuration (pool keys carry it).
    pub(crate) fn tls_identity(&self) -> u64 {
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

/// One race in progress: the state machine, and the futures it asked for.
struct Race {
    inner: Arc<Inner>,
    /// The race's state machine, or what builds it. Taken when the race ends; still here in
    /// `drop` if the caller gave up.
    state: RaceState,
    network: NetworkState,
    log: Vec<QueryLog>,
    queries: Vec<(Query, Answer)>,
    /// Attempts in flight; the first is kept inline (most races never run two at once).
    running: smallvec::SmallVec<[Running; 1]>,
    /// The attempt that finished, waiting for the race to declare it the winner. The race does
    /// so in the same turn (a finished attempt wins at once), so one slot is enough.
    finished: Option<(AttemptId, Stream, Option<Alpn>)>,
    /// The pool's side, for races run for it (boxed: most races have none).
    pool: Option<Box<PoolSide>>,
}

/// Where a race's state machine is.
enum RaceState {
    /// Running, and stepped by the driver. Boxed: the state machine is large, and the race
    /// future is moved around by value.
    Built(Box<FastFallbackExchangeFinder>),
    /// Ended: the result took it.
    Ended,
}

impl RaceState {
    /// The state machine, until the race ends.
    fn built(&self) -> Option<&FastFallbackExchangeFinder> {
        match self {
            Self::Built(finder) => Some(finder),
            Self::Ended => None,
        }
    }
}

/// What a race run for the pool holds besides the race.
struct PoolSide {
    link: PoolLink,
    /// Attempts that lost but are kept (`SpareWinners::Pool`), with their plans (they outlive
    /// the race that holds them).
    spares: Vec<(Running, ConnectPlan)>,
    /// The pooled connection the race took, once it took one.
    pooled: Option<PoolLease>,
    /// A copy of what the race taught route memory, for the calls that waited on it.
    lessons: Vec<Lesson>,
}

/// How the race ended, as far as the driver loop is concerned.
enum Ending {
    Won(AttemptId),
    Pooled(PooledId),
    Failed(RaceError),
}

impl Drop for Race {
    /// The caller dropped the connect future: every attempt's future goes with the race, and
    /// what the race learned until now still reaches route memory.
    fn drop(&mut self) {
        if let RaceState::Built(finder) = &mut self.state {
            finder.abandon(now());
            self.inner.learn(self.network.id, finder, None);
        }
    }
}

/// A race as a future ([`Race::start`] builds it): the driver loop, a turn per wake-up. A
/// plain struct rather than an `async fn`, so a connect future holds the race once and moves
/// nothing per poll.
struct Racing {
    race: Race,
    /// The race's earliest timer in tokio's timer wheel, once registered there (see
    /// [`Racing::poll_timer`]). Boxed: most races never register one, and a race future is
    /// moved before it runs.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The instant of the current turn. One clock reading per wake-up: the event that woke
    /// the race and everything the race decides because of it happen at the same instant.
    t: Moment,
    /// The race's earliest timer ([`FastFallbackExchangeFinder::poll_timeout`]).
    armed_at: Option<Instant>,
    /// Whether the race has waited once without registering its timer.
    yielded: bool,
    /// Whether a wake-up (or the start) left something to decide before the next wait.
    turn_due: bool,
}

impl Racing {
    /// Runs the race where it was built: awaiting the race itself would move the future (344
    /// bytes) once more.
    fn run(&mut self) -> impl Future<Output = <Self as Future>::Output> + '_ {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll(cx))
    }

    /// What the race taught route memory, for the pool's calls that waited on it (a race
    /// outside the pool keeps no copy). Read once the race has ended.
    fn lessons(&mut self) -> Vec<Lesson> {
        let pool = self.race.pool.as_mut();
        pool.map(|p| std::mem::take(&mut p.lessons))
            .unwrap_or_default()
    }

    /// Waits for the race's earliest timer, if it has one.
    ///
    /// Registering a timer with tokio (and taking it out again) costs more than the rest of a
    /// connect that finishes within one turn of the I/O driver, as most loopback and LAN
    /// connects do. So the first time the race waits, it does not register its timer: it asks
    /// to be polled again right after the driver's next turn (`yield_now`'s deferred wake).
    /// Only a race still waiting then registers it. Timers are absolute instants, so one that
    /// is registered a turn later still fires on time.
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.armed_at.is_none() {
            return Poll::Pending;
        }
        if self.sleep.is_none() && !self.yielded {
            self.yielded = true;
            // A fresh `yield_now` future hands the waker to the scheduler on its first poll.
            let _ = std::pin::pin!(tokio::task::yield_now()).poll(cx);
            return Poll::Pending;
        }
        let Some(at) = self.armed_at else {
            return Poll::Pending;
        };
        let at = tokio_instant(at);
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                // Re-registered only when the race's earliest timer moved.
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
                sleep
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        sleep.as_mut().poll(cx)
    }
}

impl Future for Racing {
    type Output = Result<Raced, ConnectError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Nothing in a race is pinned: its futures are boxed or `Unpin`.
        let this = self.get_mut();
        // `Race::end` takes the race's state.
        if matches!(this.race.state, RaceState::Ended) {
            return Poll::Ready(Err(ConnectError::Internal("a race polled after it ended")));
        }
        loop {
            if this.turn_due {
                this.turn_due = false;
                let (race, t) = (&mut this.race, &mut this.t);
                if let Some(ending) = race.turn(t) {
                    let result = race.end(ending, t);
                    race.hand_over_spares();
                    return Poll::Ready(result);
                }
                // Re-registered with tokio's timer wheel only when it moves (`poll_timer`).
                this.armed_at = race.poll_timeout();
            }
            let wake = match this.race.poll_wake(cx) {
                Poll::Ready(wake) => wake,
                Poll::Pending => {
                    std::task::ready!(this.poll_timer(cx));
                    Wake::Timer
                }
            };
            this.t = Moment::now();
            this.race.handle(wake, &mut this.t);
            this.turn_due = true;
        }
    }
}

impl Race {
    /// Starts a race at `t0` on `network`: the race, built in the future that runs it.
    fn start(
        inner: Arc<Inner>,
        address: Address,
        link: Option<PoolLink>,
        (network, reading): (NetworkState, tokio::time::Instant),
    ) -> Racing {
        let mut t0 = Moment::of(reading);
        // A literal's view needs no clock reading of its own.
        let memory = match (&inner.db, address.connect_host()) {
            (Some(db), (Host::Ip(ip), port)) => db.literal_view(SocketAddr::new(*ip, port)),
            (Some(db), _) => db.view(network.id, &address, t0.at()),
            (None, _) => fastfallback_route::MemoryView::disabled(),
        };
        let input = RaceInput {
            connectivity: network.connectivity,
            memory,
            seed: inner.next_seed(),
            waiting: link.as_ref().is_some_and(|l| l.waiting),
        };
        let state = RaceState::Built(FastFallbackExchangeFinder::boxed(
            address,
            Arc::clone(&inner.policy),
            input,
            t0.at(),
        ));
        // Built in its future: the race is not moved again once it runs.
        Racing {
            race: Self {
                inner,
                state,
                network,
                log: Vec::new(),
                queries: Vec::new(),
                running: smallvec::SmallVec::new(),
                finished: None,
                pool: link.map(|link| {
                    Box::new(PoolSide {
                        link,
                        spares: Vec::new(),
                        pooled: None,
                        lessons: Vec::new(),
                    })
                }),
            },
            sleep: None,
            t: t0,
            armed_at: None,
            yielded: false,
            turn_due: true,
        }
    }

    /// The listeners of a race run for the pool, if anyone listens.
    fn listeners(&self) -> Option<&crate::events::Listeners> {
        self.pool
            .as_ref()
            .map(|p| &p.link.listeners)
            .filter(|l| !l.is_empty())
    }

    /// The plan of attempt `id`: the race's record of it (the driver keeps no copy).
    fn plan_of(&self, id: AttemptId) -> Option<&ConnectPlan> {
        self.built()?.attempt(id).map(|a| &a.plan)
    }

    /// Where attempt `id` goes.
    fn route_of(&self, id: AttemptId) -> Option<SocketAddr> {
        self.plan_of(id).map(|p| p.route.target)
    }

    /// Tells the listeners that attempt `id` to `route` failed (or was cancelled).
    fn attempt_failed(&self, id: AttemptId, route: SocketAddr, error: &dyn fmt::Display) {
        if let Some(l) = self.listeners() {
            let error = error.to_string();
            l.call(|| CallEvent::ConnectFailed {
                attempt: id.get(),
                route,
                error: error.clone(),
            });
            l.connection(|| ConnectionEvent::ConnectFailed {
                attempt: id.get(),
                route,
                error,
            });
        }
    }

    /// Tells the listeners that attempt `id` connected to `route`.
    fn attempt_connected(&self, id: AttemptId, route: SocketAddr) {
        if let Some(l) = self.listeners() {
            l.call(|| CallEvent::ConnectEnd {
                attempt: id.get(),
                route,
            });
            l.connection(|| ConnectionEvent::ConnectEnd {
                attempt: id.get(),
                route,
            });
        }
    }

    /// The race's state machine, built first if it was not.
    fn finder(&mut self) -> &mut FastFallbackExchangeFinder {
        match &mut self.state {
            RaceState::Built(finder) => finder,
            // The state is taken only by `end`, after which the race is never polled again.
            _ => unreachable!("the race has not ended"),
        }
    }

    /// The race's state machine, if it is built.
    fn built(&self) -> Option<&FastFallbackExchangeFinder> {
        self.state.built()
    }

    /// The race's earliest timer ([`FastFallbackExchangeFinder::poll_timeout`]).
    fn poll_timeout(&self) -> Option<Instant> {
        self.built()
            .and_then(FastFallbackExchangeFinder::poll_timeout)
    }

    /// One turn at `t`: fires the timers that are due, then acts on every output of the race.
    /// Returns how the race ended, once it has.
    fn turn(&mut self, t: &mut Moment) -> Option<Ending> {
        let t = t.at();
        if self.finder().poll_timeout().is_some_and(|d| d <= t) {
            self.finder().handle_timeout(t);
        }
        while let Some(out) = self.finder().poll_output(t) {
            if let Some(ending) = self.act(out, t) {
                return Some(ending);
            }
        }
        None
    }

    /// Gives the attempts kept after losing to the pool, each as a future that finishes its
    /// connect (bounded by the attempt timeout).
    fn hand_over_spares(&mut self) {
        let Some(pool) = &mut self.pool else {
            return;
        };
        let Some(watch) = pool.link.watch.clone() else {
            return;
        };
        let origin = self.state.built().map(|f| f.address().clone());
        for (spare, plan) in pool.spares.drain(..) {
            let limit = self.inner.policy.attempt_timeout;
            let (attempt, route) = (spare.id, plan.route.target);
            let after = origin
                .as_ref()
                .map(|o| AfterTcp::new(&self.inner, o, &plan));
            let mut step = spare.step;
            if let Step::Tcp(f) = &mut step {
                f.start(&self.inner.socket);
            }
            let done = async move {
                match step {
                    Step::Tcp(f) => {
                        let transport = f.await.ok()?;
                        after?.run(transport).await.ok()
                    }
                    Step::Held(transport) => after?.run(*transport?).await.ok(),
                    Step::Tunnel(f) => {
                        let transport = f.await.ok()?;
                        let mut after = after?;
                        after.tunnel = None;
                        after.run(transport).await.ok()
                    }
                    Step::Tls(f) => f.await.ok(),
                }
            };
            watch.adopt(Box::pin(async move {
                SpareEnd {
                    attempt,
                    route,
                    connected: tokio::time::timeout(limit, done).await.ok().flatten(),
                }
            }));
        }
    }

    /// Starts what follows TCP for running attempt `i`: the tunnel of its plan (a step of its
    /// own, so the race knows when the attempt is in it), or else its TLS.
    fn start_after_tcp(&mut self, i: usize, transport: Transport) {
        self.start_after(i, transport, true);
    }

    /// Starts TLS for running attempt `i`, whose tunnel is open.
    fn start_tls(&mut self, i: usize, transport: Transport) {
        self.start_after(i, transport, false);
    }

    fn start_after(&mut self, i: usize, transport: Transport, tunnel: bool) {
        let id = self.running[i].id;
        let Some(finder) = self.built() else {
            return;
        };
        let Some(record) = finder.attempt(id) else {
            return;
        };
        let mut after = AfterTcp::new(&self.inner, finder.address(), &record.plan);
        match after.tunnel.take() {
            Some(t) if tunnel => {
                self.running[i].step = Step::Tunnel(Box::pin(t.open(transport)));
                return;
            }
            _ => {}
        }
        if after.tls.is_some()
            && let Some(l) = self.listeners()
        {
            l.call(|| CallEvent::SecureConnectStart { attempt: id.get() });
        }
        self.running[i].step = Step::Tls(Box::pin(after.run(transport)));
    }

    /// Starts attempt `id` on `plan`: its step, its span, and the listeners' event.
    fn start_attempt(&mut self, id: AttemptId, plan: &ConnectPlan) {
        let running = Self::running(&self.inner, self.listeners(), id, plan);
        self.running.push(running);
    }

    /// Attempt `id` on `plan`, started: its step (the socket opens when it is first
    /// polled), its span, and the listeners' event.
    #[inline]
    fn running(
        inner: &Inner,
        listeners: Option<&crate::events::Listeners>,
        id: AttemptId,
        plan: &ConnectPlan,
    ) -> Running {
        tracing::debug!(%id, %plan, "attempt starts");
        let target = plan.route.target;
        if let Some(l) = listeners {
            l.call(|| CallEvent::ConnectStart {
                attempt: id.get(),
                route: target,
            });
            l.connection(|| ConnectionEvent::ConnectStart {
                attempt: id.get(),
                route: target,
            });
        }
        let span = tracing::debug_span!(
            "attempt",
            id = id.get(),
            route = %target,
            family = if target.is_ipv6() { "IPv6" } else { "IPv4" },
        );
        let step = match &inner.dialer {
            None => TcpStep::Unstarted(target),
            Some(dialer) => TcpStep::Dialed(dialer.dial(target, &inner.socket)),
        };
        Running {
            id,
            step: Step::Tcp(step),
            // Kept only when a subscriber wants it: a disabled span costs nothing.
            span: (!span.is_disabled()).then(|| Box::new(span)),
        }
    }

    /// Acts on one output of the race. Returns how the race ended, once it has.
    fn act(&mut self, out: Output<ConnectPlan>, t: Instant) -> Option<Ending> {
        match out {
            Output::StartQuery(query) => {
                if self.log.capacity() == 0
                    && let Some(f) = self.built()
                {
                    // Sized once for the first queries (most races send two or three and
                    // nothing more): a race in flight keeps these lists.
                    let n = f.initial_queries();
                    self.log.reserve_exact(n);
                    self.queries.reserve_exact(n);
                }
                // The origin's name is read from the race: a race keeps no copy of it.
                let origin = match self.built().map(|f| f.address().connect_host().0) {
                    Some(Host::Name(n)) => n.as_str(),
                    _ => "",
                };
                let name = query.name.resolve(origin);
                tracing::debug!(%name, kind = %query.kind, "query");
                let answer = self.inner.resolver.query(name, query.kind);
                if let Some(l) = self.listeners() {
                    l.call(|| CallEvent::DnsStart {
                        query: query.clone(),
                    });
                }
                self.log.push(QueryLog {
                    query: query.clone(),
                    sent: t,
                    answered: None,
                });
                self.queries.push((query, answer));
            }
            Output::CancelQuery(query) => self.queries.retain(|(q, _)| *q != query),
            Output::StartAttempt { id, plan } => self.start_attempt(id, &plan),
            Output::CancelAttempt { id, reason } => {
                tracing::debug!(%id, %reason, "attempt cancelled");
                if reason == CancelReason::LostRace
                    && self.inner.policy.spare_winners == SpareWinners::Pool
                    && let Some(pool) = &mut self.pool
                    && pool.link.watch.is_some()
                    && let Some(at) = self.running.iter().position(|r| r.id == id)
                    && let Some(plan) = self.state.built().and_then(|f| f.attempt(id))
                {
                    // Kept: it finishes on its own after the race and may be pooled. For the
                    // call it is over.
                    let plan = plan.plan.clone();
                    let spare = self.running.remove(at);
                    if let Some(l) = pool.link.listeners.call.as_ref() {
                        l.event(&CallEvent::ConnectFailed {
                            attempt: id.get(),
                            route: plan.route.target,
                            error: format!(
                                "cancelled: {reason} (kept, to be pooled if it connects)"
                            ),
                        });
                    }
                    pool.spares.push((spare, plan));
                    return None;
                }
                if self.running.iter().any(|r| r.id == id)
                    && let Some(route) = self.route_of(id)
                {
                    self.attempt_failed(id, route, &format_args!("cancelled: {reason}"));
                }
                // Dropping the future closes the socket now, in this turn.
                self.running.retain(|r| r.id != id);
                if self.finished.as_ref().is_some_and(|(f, ..)| *f == id) {
                    self.finished = None;
                }
            }
            Output::ResumeAttempt { id, plan } => {
                let i = self.running.iter().position(|r| r.id == id)?;
                let Step::Held(transport) = &mut self.running[i].step else {
                    return None;
                };
                let transport = *transport.take()?;
                // The race's record of the attempt carries the same plan.
                tracing::debug!(%id, %plan, "TLS goes ahead: the HTTPS answer is in");
                self.start_after_tcp(i, transport);
            }
            // This driver goes on to TLS by itself as soon as TCP (or the tunnel) is done, in
            // the same turn that reports it (`Wake::Tcp`, `Wake::Tunnel`): nothing to do.
            Output::StartTls(_) => {}
            Output::Done(Winner::Attempt(id)) => return Some(Ending::Won(id)),
            Output::Done(Winner::Pooled(id)) => return Some(Ending::Pooled(id)),
            Output::Failed(error) => return Some(Ending::Failed(error)),
        }
        None
    }

    /// Closes whatever is left and turns the race into its result.
    fn end(&mut self, ending: Ending, t: &mut Moment) -> Result<Raced, ConnectError> {
        if self.listeners().is_some() {
            for r in &self.running {
                let Some(route) = self.route_of(r.id) else {
                    continue;
                };
                self.attempt_failed(r.id, route, &"cancelled: the race ended");
            }
        }
        self.running.clear();
        // The finished attempt's stream stays in its slot until the result takes it: moved
        // once, straight into the connection.
        let won = matches!((&ending, &self.finished), (Ending::Won(id), Some((f, ..))) if f == id);
        if !won {
            self.finished = None;
        }
        let mut stream = None;
        let (winner, alpn) = match &ending {
            Ending::Won(id) => {
                let Some((_, won_stream, alpn)) = self.finished.take() else {
                    return Err(ConnectError::Internal("a winner without a stream"));
                };
                stream = Some(won_stream);
                (Some(Winner::Attempt(*id)), alpn)
            }
            Ending::Pooled(id) => (Some(Winner::Pooled(*id)), None),
            Ending::Failed(_) => (None, None),
        };
        let story = match std::mem::replace(&mut self.state, RaceState::Ended) {
            RaceState::Built(mut finder) => {
                let keep = self.pool.as_mut().map(|p| &mut p.lessons);
                self.inner.learn(self.network.id, &mut finder, keep);
                if won && let Some(until) = finder.dns_tail_deadline() {
                    self.start_dns_tail(until);
                }
                Story {
                    race: finder,
                    queries: std::mem::take(&mut self.log),
                    winner,
                    alpn,
                    end: t.at(),
                }
            }
            RaceState::Ended => return Err(ConnectError::Internal("a race that ended twice")),
        };
        match ending {
            Ending::Won(id) => {
                let Some(stream) = stream else {
                    return Err(ConnectError::Internal("a winner without a stream"));
                };
                tracing::debug!(%id, "race won");
                Ok(Raced::Connected(Connection {
                    stream,
                    story,
                    report: OnceLock::new(),
                }))
            }
            Ending::Pooled(id) => match self
                .pool
                .as_mut()
                .and_then(|p| p.pooled.take())
                .filter(|l| l.id() == id)
            {
                Some(lease) => {
                    tracing::debug!(%id, "race ended on a pooled connection");
                    Ok(Raced::Pooled {
                        lease: Box::new(lease),
                        story,
                    })
                }
                None => Err(ConnectError::Internal("a pooled winner without its lease")),
            },
            Ending::Failed(error) => {
                let mut report = story.report();
                report.error = Some(ReportError::from(&error));
                Err(ConnectError::Race(Box::new(RaceFailure {
                    earlier: Vec::new(),
                    error,
                    report,
                })))
            }
        }
    }

    /// Keeps the queries still in flight until the end of the DNS tail the race chose
    /// (HEv3 §6), so their answers reach the resolver's cache for the next race.
    fn start_dns_tail(&mut self, until: Instant) {
        if self.queries.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let until = tokio_instant(until);
        for (_, answer) in self.queries.drain(..) {
            tokio::spawn(async move {
                let _ = tokio::time::timeout_at(until, answer).await;
            });
        }
    }

    /// Polls everything but the timer: the pool's offers, the queries and the attempts.
    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<Wake> {
        if let Some(pool) = &mut self.pool
            && let Poll::Ready(Some(offer)) = pool.link.offers.poll_recv(cx)
        {
            return Poll::Ready(Wake::Offer(offer));
        }
        for i in 0..self.queries.len() {
            if let Poll::Ready(answer) = self.queries[i].1.as_mut().poll(cx) {
                let (query, _) = self.queries.remove(i);
                return Poll::Ready(Wake::Dns(query, answer));
            }
        }
        let options = &self.inner.socket;
        for (i, r) in self.running.iter_mut().enumerate() {
            let _span = r.span.as_deref().map(tracing::Span::enter);
            match &mut r.step {
                Step::Tcp(f) => {
                    if let Poll::Ready(res) = f.poll_step(cx, options) {
                        return Poll::Ready(Wake::Tcp(i, res));
                    }
                }
                Step::Tunnel(f) => {
                    if let Poll::Ready(res) = f.as_mut().poll(cx) {
                        return Poll::Ready(Wake::Tunnel(i, res));
                    }
                }
                Step::Tls(f) => {
                    if let Poll::Ready(res) = f.as_mut().poll(cx) {
                        return Poll::Ready(Wake::Tls(i, res));
                    }
                }
                // Parked: nothing to poll until the race resumes it.
                Step::Held(_) => {}
            }
        }
        Poll::Pending
    }

    /// Running attempt `i` connected to `route` over plain TCP, with nothing after it: it is
    /// the race's finished attempt.
    #[inline]
    fn connected_plain(&mut self, i: usize, route: SocketAddr, transport: Transport) {
        let id = self.running.remove(i).id;
        self.attempt_connected(id, route);
        self.finished = Some((id, Stream::Plain(transport), None));
    }

    /// Hands one event to the race.
    fn handle(&mut self, wake: Wake, t: &mut Moment) {
        match wake {
            Wake::Timer => {}
            Wake::Offer(Offer::Pooled(lease)) => {
                // A race that ended already refuses it; dropping the lease gives it back.
                if self.finder().handle_pooled(lease.id(), t.at())
                    && let Some(pool) = &mut self.pool
                {
                    pool.pooled = Some(lease);
                }
            }
            Wake::Offer(Offer::Release(news)) => self.finder().handle_release(&news, t.at()),
            Wake::Dns(query, answer) => {
                let dsts = self.network.connectivity.destinations(&answer);
                // Only the origin's own A and AAAA answers count for coalescing, not HTTPS
                // hints or a service target's addresses (§3.7).
                if let Some(watch) = self.pool.as_ref().and_then(|p| p.link.watch.as_ref())
                    && query.is_origin()
                    && matches!(answer, DnsAnswer::Addresses(_))
                    && !dsts.is_empty()
                {
                    watch.resolved(&dsts);
                }
                let sources = self.inner.sources.find(dsts);
                self.finder()
                    .handle_dns(query.clone(), &answer, sources, t.at());
                if let Some(l) = self.listeners() {
                    l.call(|| CallEvent::DnsEnd {
                        query: query.clone(),
                        answer: answer.clone(),
                    });
                }
                // The report keeps the answer itself; the race took what it needed.
                if let Some(q) = self
                    .log
                    .iter_mut()
                    .find(|q| q.query == query && q.answered.is_none())
                {
                    q.answered = Some((t.at(), answer));
                }
            }
            Wake::Tcp(i, Ok(transport)) => {
                let id = self.running[i].id;
                let Some(plan) = self.plan_of(id) else {
                    return;
                };
                let route = plan.route.target;
                if plan.tls.is_none() && !plan.tunnel {
                    // Nothing follows TCP: the attempt is done (checked before building the
                    // next step, which costs a few reference counts on every connect).
                    self.connected_plain(i, route, transport);
                    self.finder()
                        .handle_attempt(id, AttemptEvent::Connected(None), t.at());
                    return;
                }
                if plan.hold_tls {
                    // No ClientHello yet: the race resumes it once the HTTPS answer is in.
                    self.running[i].step = Step::Held(Some(Box::new(transport)));
                } else {
                    self.start_after_tcp(i, transport);
                }
                self.finder()
                    .handle_attempt(id, AttemptEvent::TcpConnected, t.at());
            }
            Wake::Tunnel(i, Ok(transport)) => {
                let id = self.running[i].id;
                let Some(plan) = self.plan_of(id) else {
                    return;
                };
                let (route, tls) = (plan.route.target, plan.tls.is_some());
                self.finder()
                    .handle_attempt(id, AttemptEvent::TunnelOpen, t.at());
                if tls {
                    self.start_tls(i, transport);
                } else {
                    self.connected_plain(i, route, transport);
                    self.finder()
                        .handle_attempt(id, AttemptEvent::Connected(None), t.at());
                }
            }
            Wake::Tls(i, Ok((stream, alpn))) => {
                let done = self.running.remove(i);
                let id = done.id;
                if let Some(l) = self.listeners() {
                    l.call(|| CallEvent::SecureConnectEnd {
                        attempt: id.get(),
                        alpn: alpn.as_ref().map(ToString::to_string),
                    });
                }
                if let Some(route) = self.route_of(id) {
                    self.attempt_connected(id, route);
                }
                self.finished = Some((id, stream, alpn.clone()));
                self.finder()
                    .handle_attempt(id, AttemptEvent::Connected(alpn), t.at());
            }
            Wake::Tcp(i, Err(error)) | Wake::Tunnel(i, Err(error)) | Wake::Tls(i, Err(error)) => {
                let id = self.running.remove(i).id;
                tracing::debug!(%id, %error, "attempt failed");
                let Some(failed) = self.plan_of(id) else {
                    return;
                };
                self.attempt_failed(id, failed.route.target, &error);
                let follow_up = fastfallback_plan::tls_follow_up(
                    failed,
                    error.phase,
                    &crate::ech::tls_failure(&error),
                    self.inner.tls_fallbacks.len(),
                );
                self.finder()
                    .handle_attempt(id, AttemptEvent::Failed { error, follow_up }, t.at());
            }
        }
    }
}

mod roots;

#[cfg(test)]
mod tests {
    use super::*;

    /// A build error keeps what caused it as its `source()` (here the file system's error).
    #[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
    #[test]
    fn a_build_error_keeps_its_cause_as_its_source() {
        let err = Connector::builder()
            .memory_file("/nonexistent-directory-of-this-test/memory")
            .build()
            .expect_err("a missing directory is refused");
        let source = std::error::Error::source(&err).expect("a source");
        assert!(source.is::<io::Error>(), "{source:?}");
    }

    /// A broken invariant is its own kind, never "unsupported", and says it is a bug.
    #[test]
    fn an_internal_error_is_told_apart_from_an_unsupported_feature() {
        let e = ConnectError::Internal("a race that ended twice");
        assert!(e.to_string().contains("a bug"), "{e}");
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::Other);
        let unsupported: io::Error = ConnectError::Unsupported("QUIC").into();
        assert_eq!(unsupported.kind(), io::ErrorKind::Unsupported);
    }

    /// The provider's random generator is set up when the first connector is built, not
    /// in the first handshake (whose report would count it as TLS).
    #[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
    #[test]
    fn building_a_connector_warms_the_random_generator_up() {
        let _ = Connector::builder().build().unwrap();
        assert!(WARMED.is_completed());
    }

    /// The kernel's tables are read again only once the last reading is `NETWORK_TTL` old.
    #[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
    #[test]
    fn the_network_reading_is_reused_until_its_ttl_and_read_again_after() {
        let connector = Connector::builder().build().unwrap();
        let inner = &connector.inner;
        let t0 = tokio::time::Instant::now();
        // A reading no kernel gives, so a fresh one is told apart.
        let marked = NetworkState {
            connectivity: Connectivity::DUAL_STACK,
            id: NetworkId(0x5eed),
        };
        *inner.detected.lock().unwrap() = Some((t0 + NETWORK_TTL, marked));
        let just_before = t0 + NETWORK_TTL - Duration::from_millis(1);
        assert_eq!(inner.network(just_before).id, marked.id);
        let fresh = inner.network(t0 + NETWORK_TTL);
        assert_ne!(
            fresh.id, marked.id,
            "read again once the reading is {NETWORK_TTL:?} old"
        );
        // The fresh reading holds for another `NETWORK_TTL` from when it was taken.
        let until = inner.detected.lock().unwrap().map(|(until, _)| until);
        assert_eq!(until, Some(t0 + NETWORK_TTL + NETWORK_TTL));
    }

    /// Built with no crypto backend (`--no-default-features`; CI runs it so) and with no
    /// process-wide provider, a connector cannot do TLS, and says how to fix it.
    #[cfg(not(any(feature = "aws-lc-rs", feature = "ring")))]
    #[test]
    fn without_a_crypto_backend_build_names_the_features_to_enable() {
        let err = Connector::builder()
            .resolver(crate::StaticResolver::default())
            .build()
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`aws-lc-rs` or `ring` feature"), "{text}");
        assert!(text.contains("install_default"), "{text}");
    }

    #[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
    #[test]
    fn with_a_crypto_backend_the_connector_builds_its_own_tls_configuration() {
        let connector = Connector::builder()
            .resolver(crate::StaticResolver::default())
            .build()
            .unwrap();
        assert!(connector.verifier().is_some());
        assert_eq!(
            connector.inner.tls.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    /// With the `platform-verifier` feature (CI builds it), the OS verifier is the one kept:
    /// a certificate the system does not trust is refused.
    #[cfg(all(
        feature = "platform-verifier",
        any(feature = "aws-lc-rs", feature = "ring")
    ))]
    #[test]
    fn the_platform_verifier_refuses_a_certificate_the_system_does_not_trust() {
        use rustls::pki_types::{ServerName, UnixTime};
        let connector = Connector::builder()
            .resolver(crate::StaticResolver::default())
            .platform_verifier()
            .build()
            .unwrap();
        let tls = fastfallback_testnet::TlsMaterial::new(&["localhost".to_owned()], &[]).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let verdict = connector.verifier().unwrap().verify_server_cert(
            &tls.ca_der(),
            &[],
            &name,
            &[],
            UnixTime::now(),
        );
        assert!(verdict.is_err(), "{verdict:?}");
    }
}

/// A connection and the race's result are moved several times per connect. Moves of up to
/// 128 bytes are inlined; larger ones call `memcpy`, which cost ~29 instructions each when a
/// `Connection` was 224 bytes (docs/benchmarks.md). tokio's `TcpStream` is 32 bytes in a
/// release build (more in some test builds), so our part of a connection must stay within 96.
#[cfg(all(test, target_pointer_width = "64"))]
mod layout {
    use super::{ConnectError, Connection, Raced, Stream};

    #[test]
    fn a_connection_and_a_race_result_move_without_a_memcpy_call() {
        let ours = size_of::<Connection>() - size_of::<Stream>();
        assert!(
            ours <= 96,
            "Connection holds {ours} bytes besides its stream"
        );
        let raced = size_of::<Result<Raced, ConnectError>>();
        assert!(raced <= size_of::<Connection>(), "a race's result: {raced}");
    }
}
