//! [`ConnectorBuilder`]: settings, the TLS configuration and the crypto provider.

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use fastfallback_plan::FallbackPolicy;
use fastfallback_proto::AlpnOffer;
use fastfallback_route::{Connectivity, NetworkId, Proxy, RouteDatabase, SourceSelector};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::{ClientConfig, RootCertStore};

use crate::memory_file::MemoryFile;
use crate::{
    Dial, HickoryResolver, KernelSources, NetworkState, Resolve, SocketOptions, detect_network,
};

use super::clock::*;
use super::error::BuildError;
use super::shared::Connector;
use super::shared::*;

/// Which certificates a connector trusts.
#[derive(Default)]
pub(super) enum Roots {
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
pub(super) fn crypto_provider() -> Result<Arc<rustls::crypto::CryptoProvider>, BuildError> {
    let provider = chosen_provider()?;
    warm_up(&provider);
    Ok(provider)
}

/// Set once the first connector of the process warmed its provider up.
pub(super) static WARMED: std::sync::Once = std::sync::Once::new();

/// Draws from the provider's random generator once per process, while the connector is
/// built: aws-lc sets its generator up on the first draw, which took 45 ms here (the next
/// draw 2 µs). Left to the first handshake, that time would be reported as TLS.
pub(super) fn warm_up(provider: &rustls::crypto::CryptoProvider) {
    WARMED.call_once(|| {
        let _ = provider.secure_random.fill(&mut [0u8; 1]);
    });
}

pub(super) fn chosen_provider() -> Result<Arc<rustls::crypto::CryptoProvider>, BuildError> {
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
    pub(super) policy: FallbackPolicy,
    pub(super) resolver: Option<Arc<dyn Resolve>>,
    pub(super) roots: Roots,
    pub(super) tls: Option<ClientConfig>,
    pub(super) tls_fallbacks: Vec<ClientConfig>,
    pub(super) ech_grease: bool,
    pub(super) socket: SocketOptions,
    pub(super) dialer: Option<Arc<dyn Dial>>,
    pub(super) sources: Option<Box<dyn SourceSelector + Send + Sync>>,
    pub(super) connectivity: Option<Connectivity>,
    pub(super) network_id: Option<NetworkId>,
    pub(super) db: Option<Arc<RouteDatabase>>,
    pub(super) memory_file: Option<PathBuf>,
    pub(super) proxies: Vec<Proxy>,
    pub(super) seed: Option<u64>,
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
    /// names its own proxy ([`fastfallback_route::Address::with_proxy`]) uses only that one. Pooled connections
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
        #[cfg(not(feature = "quic"))]
        if policy.quic {
            // Refused here rather than failing every QUIC attempt of every race: the plan
            // crate orders QUIC endpoints (HEv3 §5.1, profile P11), but this build has no
            // QUIC step.
            return Err(BuildError::Unsupported(
                "QUIC attempts (FallbackPolicy::quic): build fastfallback-net with its `quic` feature",
            ));
        }
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
        #[cfg(feature = "quic")]
        let quic = if policy.quic {
            Some(crate::quic::client_config(&tls).map_err(BuildError::Tls)?)
        } else {
            None
        };
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
                #[cfg(feature = "quic")]
                quic,
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
                id: Inner::next_id(),
            }),
        })
    }
}
