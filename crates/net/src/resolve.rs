//! DNS for the race: one query per record type, each answer handed over as it arrives.
//!
//! The race sends AAAA, A and (for `http`/`https` origins) HTTPS queries at once and moves on as
//! soon as the answers allow (HEv3 §4.2, RFC 8305 §3). A resolver that waits for both address
//! families before answering, such as hickory's `lookup_ip` or `getaddrinfo`, would defeat the
//! Resolution Delay, so [`Resolve`] asks for one record type at a time.

use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use fastfallback_proto::{Alpn, DnsAnswer, DnsError, HttpsRecord, QueryKind};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError as HickoryDnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::rdata::svcb::{SvcParamKey, SvcParamValue};
use hickory_resolver::proto::rr::{RData, RecordType};

use crate::answer_cache::{AnswerCache, negative_for};

/// The future a [`Resolve`] implementation returns: one answer to one query.
pub type Answer = Pin<Box<dyn Future<Output = DnsAnswer> + Send + 'static>>;

/// A DNS resolver the race can use: one query per record type.
///
/// Implement it to plug in your own DNS (a cache, DNS over HTTPS, a static table). Every
/// failure is an answer too: return [`DnsAnswer::Error`], or an empty list for NODATA. The race
/// treats all of them as negative answers (HEv3 §4.2).
///
/// ```
/// use fastfallback_net::{Answer, Resolve};
/// use fastfallback_proto::{DnsAnswer, QueryKind};
///
/// /// Every name is 192.0.2.1, with no IPv6 and no HTTPS record.
/// struct Static;
///
/// impl Resolve for Static {
///     fn query(&self, _name: &str, kind: QueryKind) -> Answer {
///         let answer = match kind {
///             QueryKind::A => DnsAnswer::Addresses(vec!["192.0.2.1".parse().unwrap()]),
///             QueryKind::Aaaa => DnsAnswer::Addresses(vec![]),
///             QueryKind::Https => DnsAnswer::Https(vec![]),
///         };
///         Box::pin(async move { answer })
///     }
/// }
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// Sends one query for `name` and resolves to its answer. Dropping the future abandons the
    /// query.
    fn query(&self, name: &str, kind: QueryKind) -> Answer;
}

/// [`Resolve`] on hickory-resolver: separate AAAA, A and HTTPS lookups that each complete on
/// their own answer.
///
/// When hickory's cache is on (`cache_size > 0`, its default), the adapter keeps the answers
/// it got as well, until their TTL ends (negative ones for their SOA's negative TTL, within
/// the resolver's bounds; errors never), and answers a repeated query from them without a
/// lookup: a lookup that hickory answers from its own cache still costs more than a loopback
/// connect. [`Self::clear_cache`] clears both.
#[derive(Clone)]
pub struct HickoryResolver {
    inner: TokioResolver,
    /// The answers kept (`None` when hickory's cache is off).
    kept: Option<Arc<AnswerCache>>,
}

/// Why a resolver could not be built. hickory's own error is its
/// [`source`](std::error::Error::source).
#[derive(Debug)]
pub struct ResolverError {
    cause: Box<dyn std::error::Error + Send + Sync>,
}

impl ResolverError {
    fn new(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            cause: Box::new(cause),
        }
    }
}

impl fmt::Display for ResolverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot set up the DNS resolver: {}", self.cause)
    }
}

impl std::error::Error for ResolverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.cause)
    }
}

impl HickoryResolver {
    /// A resolver that reads the system configuration (`/etc/resolv.conf` on Unix).
    pub fn from_system_conf() -> Result<Self, ResolverError> {
        let builder = TokioResolver::builder_tokio().map_err(ResolverError::new)?;
        let inner = builder.build().map_err(ResolverError::new)?;
        Ok(Self::from_resolver(inner))
    }

    /// A resolver that asks one name server, over UDP with TCP fallback, with hickory's
    /// defaults otherwise (its cache included).
    pub fn with_name_server(server: SocketAddr) -> Result<Self, ResolverError> {
        Self::with_name_server_opts(server, ResolverOpts::default())
    }

    /// Like [`Self::with_name_server`], with explicit resolver options (for example
    /// `cache_size = 0` so every lookup reaches the server).
    pub fn with_name_server_opts(
        server: SocketAddr,
        opts: ResolverOpts,
    ) -> Result<Self, ResolverError> {
        let mut ns = NameServerConfig::udp_and_tcp(server.ip());
        for c in &mut ns.connections {
            c.port = server.port();
        }
        let config = ResolverConfig::from_name_servers(vec![ns]);
        let inner = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(opts)
            .build()
            .map_err(ResolverError::new)?;
        Ok(Self::from_resolver(inner))
    }

    /// Wraps a hickory resolver built elsewhere. Answers are kept (see the type's docs) when
    /// its options have a cache (`cache_size > 0`), for at most that many names.
    pub fn from_resolver(inner: TokioResolver) -> Self {
        let size = inner.options().cache_size;
        let kept = (size > 0).then(|| {
            Arc::new(AnswerCache::new(
                usize::try_from(size).unwrap_or(usize::MAX),
            ))
        });
        Self { inner, kept }
    }

    /// The hickory resolver inside. Its `clear_cache` does not reach the answers this adapter
    /// keeps: use [`Self::clear_cache`].
    pub fn resolver(&self) -> &TokioResolver {
        &self.inner
    }

    /// Forgets every answer: hickory's cache and the answers kept here. The next query of
    /// every name reaches the name server.
    pub fn clear_cache(&self) {
        self.inner.clear_cache();
        if let Some(kept) = &self.kept {
            kept.clear();
        }
    }
}

impl fmt::Debug for HickoryResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HickoryResolver").finish_non_exhaustive()
    }
}

impl Resolve for HickoryResolver {
    fn query(&self, name: &str, kind: QueryKind) -> Answer {
        if let Some(kept) = &self.kept
            && let Some(answer) = kept.get(name, kind, std::time::Instant::now())
        {
            return Box::pin(std::future::ready(answer));
        }
        let resolver = self.inner.clone();
        let kept = self.kept.clone();
        let name = name.to_owned();
        Box::pin(async move {
            let rtype = match kind {
                QueryKind::Aaaa => RecordType::AAAA,
                QueryKind::A => RecordType::A,
                QueryKind::Https => RecordType::HTTPS,
            };
            let (answer, until) = match resolver.lookup(name.as_str(), rtype).await {
                Ok(lookup) => (
                    answer_from_records(kind, lookup.answers().iter().map(|r| &r.data)),
                    Some(lookup.valid_until()),
                ),
                Err(e) => {
                    // RFC 2308 §5: a negative answer is kept for its SOA's negative TTL.
                    let until = match &e {
                        NetError::Dns(HickoryDnsError::NoRecordsFound(nr)) => {
                            nr.negative_ttl.map(|ttl| {
                                let opts = resolver.options();
                                std::time::Instant::now()
                                    + negative_for(
                                        ttl,
                                        opts.negative_min_ttl,
                                        opts.negative_max_ttl,
                                    )
                            })
                        }
                        _ => None,
                    };
                    (answer_from_error(kind, &e), until)
                }
            };
            if let (Some(kept), Some(until)) = (kept, until) {
                kept.put(&name, kind, answer.clone(), until);
            }
            answer
        })
    }
}

/// Turns the records of one lookup into the race's answer, keeping only the type asked for
/// (CNAME records on the way are skipped).
fn answer_from_records<'a>(kind: QueryKind, records: impl Iterator<Item = &'a RData>) -> DnsAnswer {
    match kind {
        QueryKind::Https => DnsAnswer::Https(
            records
                .filter_map(|r| match r {
                    RData::HTTPS(h) => Some(https_record(h)),
                    _ => None,
                })
                .collect(),
        ),
        QueryKind::Aaaa | QueryKind::A => DnsAnswer::Addresses(
            records
                .filter_map(|r| match (kind, r) {
                    (QueryKind::Aaaa, RData::AAAA(a)) => Some(IpAddr::V6(a.0)),
                    (QueryKind::A, RData::A(a)) => Some(IpAddr::V4(a.0)),
                    _ => None,
                })
                .collect(),
        ),
    }
}

fn https_record(h: &hickory_resolver::proto::rr::rdata::HTTPS) -> HttpsRecord {
    let mut out = HttpsRecord {
        priority: h.svc_priority,
        target: h.target_name.to_string(),
        ..HttpsRecord::default()
    };
    let present: Vec<&SvcParamKey> = h.svc_params.iter().map(|(k, _)| k).collect();
    for (key, value) in &h.svc_params {
        match value {
            SvcParamValue::Alpn(a) => {
                out.alpn = a.0.iter().map(|s| Alpn::from_bytes(s.as_bytes())).collect();
            }
            SvcParamValue::NoDefaultAlpn => out.no_default_alpn = true,
            SvcParamValue::Port(p) => out.port = Some(*p),
            SvcParamValue::Ipv4Hint(hint) => out.ipv4hint = hint.0.iter().map(|a| a.0).collect(),
            SvcParamValue::Ipv6Hint(hint) => out.ipv6hint = hint.0.iter().map(|a| a.0).collect(),
            SvcParamValue::EchConfigList(list) => out.ech = Some(list.0.as_slice().into()),
            SvcParamValue::Mandatory(m) => {
                // RFC 9460 §8: a record that makes a key we do not understand mandatory is
                // incompatible and must be ignored.
                out.unknown_mandatory |= m.0.iter().any(|k| !understood(k));
                // §8: every key it names must be in the record, and it may not name itself.
                if m.0.contains(&SvcParamKey::Mandatory) {
                    out.malformed = Some("mandatory lists itself".to_owned());
                } else if let Some(missing) = m.0.iter().find(|k| !present.contains(k)) {
                    out.malformed = Some(format!("mandatory key {missing} is missing"));
                }
            }
            _ => {
                let _ = key;
            }
        }
    }
    // §7.1.1: no-default-alpn without alpn leaves no protocol at all.
    if out.no_default_alpn && out.alpn.is_empty() && out.malformed.is_none() {
        out.malformed = Some("no-default-alpn without alpn".to_owned());
    }
    out
}

/// The SvcParamKeys a TCP client of ours acts on or can safely ignore (RFC 9460 §7).
fn understood(key: &SvcParamKey) -> bool {
    matches!(
        key,
        SvcParamKey::Mandatory
            | SvcParamKey::Alpn
            | SvcParamKey::NoDefaultAlpn
            | SvcParamKey::Port
            | SvcParamKey::Ipv4Hint
            | SvcParamKey::Ipv6Hint
            | SvcParamKey::EchConfigList
    )
}

/// Maps a hickory failure to the race's answer: NODATA becomes an empty answer, NXDOMAIN,
/// SERVFAIL and timeouts become errors (all negative, HEv3 §4.2).
fn answer_from_error(kind: QueryKind, e: &NetError) -> DnsAnswer {
    let empty = || match kind {
        QueryKind::Https => DnsAnswer::Https(Vec::new()),
        QueryKind::Aaaa | QueryKind::A => DnsAnswer::Addresses(Vec::new()),
    };
    match e {
        NetError::Dns(HickoryDnsError::NoRecordsFound(nr)) => {
            if nr.response_code == ResponseCode::NXDomain {
                DnsAnswer::Error(DnsError::NxDomain)
            } else {
                empty()
            }
        }
        NetError::Dns(HickoryDnsError::ResponseCode(ResponseCode::ServFail)) => {
            DnsAnswer::Error(DnsError::ServFail)
        }
        NetError::Timeout => DnsAnswer::Error(DnsError::TimedOut),
        other => DnsAnswer::Error(DnsError::Other(other.to_string())),
    }
}

/// [`Resolve`] from a fixed table, like a hosts file: names map to addresses, answered at once.
/// Names not in the table get NXDOMAIN. Useful to pin a name to addresses, and in tests.
///
/// ```
/// use fastfallback_net::StaticResolver;
///
/// let hosts = StaticResolver::new().with("origin.test", ["::1".parse().unwrap(), "127.0.0.1".parse().unwrap()]);
/// assert_eq!(hosts.addresses("ORIGIN.test.").len(), 2);
/// ```
#[derive(Clone, Debug, Default)]
pub struct StaticResolver {
    /// Names are few and come from the caller: an integer hash will do.
    table: std::collections::HashMap<String, Vec<IpAddr>, fastfallback_proto::FxBuildHasher>,
}

impl StaticResolver {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the addresses of `name`.
    #[must_use]
    pub fn with(mut self, name: &str, addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        self.table
            .insert(normalize(name).into_owned(), addrs.into_iter().collect());
        self
    }

    /// The addresses of `name` (case and a trailing dot do not matter).
    pub fn addresses(&self, name: &str) -> &[IpAddr] {
        self.table.get(&*normalize(name)).map_or(&[], Vec::as_slice)
    }
}

/// `name` in lower case without its trailing dot; borrowed when it is so already (a race's
/// names are: the origin parser lower-cases them).
fn normalize(name: &str) -> std::borrow::Cow<'_, str> {
    let name = name.trim_end_matches('.');
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

impl Resolve for StaticResolver {
    fn query(&self, name: &str, kind: QueryKind) -> Answer {
        let answer = match (self.table.get(&*normalize(name)), kind) {
            (None, _) => DnsAnswer::Error(DnsError::NxDomain),
            (Some(_), QueryKind::Https) => DnsAnswer::Https(Vec::new()),
            (Some(addrs), QueryKind::Aaaa) => {
                DnsAnswer::Addresses(addrs.iter().copied().filter(IpAddr::is_ipv6).collect())
            }
            (Some(addrs), QueryKind::A) => {
                DnsAnswer::Addresses(addrs.iter().copied().filter(IpAddr::is_ipv4).collect())
            }
        };
        Box::pin(std::future::ready(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_resolver::proto::rr::Name;
    use hickory_resolver::proto::rr::rdata::HTTPS;
    use hickory_resolver::proto::rr::rdata::svcb::{self, SVCB};

    /// hickory's error is kept whole, as the source, not flattened into text.
    #[test]
    fn a_resolver_error_keeps_hickorys_error_as_its_source() {
        let e = ResolverError::new(std::io::Error::other("no name servers"));
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.is::<std::io::Error>());
        assert_eq!(
            e.to_string(),
            "cannot set up the DNS resolver: no name servers"
        );
    }

    fn record(params: Vec<(SvcParamKey, SvcParamValue)>) -> HttpsRecord {
        https_record(&HTTPS(SVCB::new(1, Name::root(), params)))
    }

    fn alpn() -> (SvcParamKey, SvcParamValue) {
        (
            SvcParamKey::Alpn,
            SvcParamValue::Alpn(svcb::Alpn(vec!["h2".to_owned()])),
        )
    }

    fn mandatory(keys: Vec<SvcParamKey>) -> (SvcParamKey, SvcParamValue) {
        (
            SvcParamKey::Mandatory,
            SvcParamValue::Mandatory(svcb::Mandatory(keys)),
        )
    }

    #[test]
    fn a_mandatory_key_missing_from_the_record_makes_it_malformed() {
        // RFC 9460 §8.
        let r = record(vec![mandatory(vec![SvcParamKey::Port]), alpn()]);
        assert_eq!(
            r.malformed.as_deref(),
            Some("mandatory key port is missing")
        );
        let r = record(vec![mandatory(vec![SvcParamKey::Alpn]), alpn()]);
        assert_eq!(r.malformed, None);
        assert!(!r.unknown_mandatory);
        let r = record(vec![mandatory(vec![SvcParamKey::Mandatory]), alpn()]);
        assert_eq!(r.malformed.as_deref(), Some("mandatory lists itself"));
    }

    #[test]
    fn no_default_alpn_without_alpn_is_malformed() {
        // RFC 9460 §7.1.1.
        let r = record(vec![(
            SvcParamKey::NoDefaultAlpn,
            SvcParamValue::NoDefaultAlpn,
        )]);
        assert_eq!(r.malformed.as_deref(), Some("no-default-alpn without alpn"));
        let r = record(vec![
            alpn(),
            (SvcParamKey::NoDefaultAlpn, SvcParamValue::NoDefaultAlpn),
        ]);
        assert_eq!(r.malformed, None);
        assert_eq!(r.alpn, [Alpn::H2]);
    }
}
