//! The endpoint list: the addresses DNS gave, reconciled with every new answer (HEv3 §7) and
//! kept in the order attempts take them.

use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::sync::Arc;

use fastfallback_proto::{Family, Instant, TransportKind};
use fastfallback_route::order::{OrderContext, Orderable, order};
use fastfallback_route::{Candidate, Source, SourceOf};
use smallvec::SmallVec;

use super::FastFallbackExchangeFinder;
use super::rare::Rare;
use crate::{QuicOrder, TlsStep};

/// One address the race may try, with what ordering and attempting it need.
#[derive(Clone, Copy, Debug)]
pub(super) struct Endpoint {
    pub(super) logical: IpAddr,
    pub(super) target: SocketAddr,
    pub(super) tried: bool,
    /// The service priority group ([`fastfallback_route::Candidate::group`]).
    pub(super) group: u16,
    /// Whether it is a fallback without SVCB ([`fastfallback_route::Candidate::without_svcb`]).
    pub(super) without_svcb: bool,
    /// Which TLS step its attempts take: 0 the race's own, `n` the `n`-th of
    /// the race's extra TLS steps ([`super::rare::Rare::tls_steps`]: its service's ECH
    /// configuration, or QUIC's ALPN).
    pub(super) tls_variant: u16,
    /// Whether the current answers still list it (an attempted endpoint stays in the list
    /// after its answer is withdrawn, HEv3 §7, but is no longer listed).
    pub(super) listed: bool,
    /// What its attempts connect over. An address whose service is reached over both TCP
    /// and QUIC is two endpoints (HEv3 §5.1).
    pub(super) transport: TransportKind,
}

/// An endpoint with its source address ([`source_of`]), looked up only when the list is
/// ordered: the one time a source matters (RFC 6724 §6). A race with one endpoint (every IP
/// literal's) never orders, so it never looks one up.
struct Sourced {
    endpoint: Endpoint,
    source: Option<Source>,
}

impl Orderable for Sourced {
    fn logical(&self) -> IpAddr {
        self.endpoint.logical
    }
    fn target(&self) -> SocketAddr {
        self.endpoint.target
    }
    fn source(&self) -> Option<Source> {
        self.source
    }
}

impl Sourced {
    /// `endpoint` with the source the driver found for it.
    fn new(endpoint: Endpoint, sources: &[SourceOf]) -> Self {
        Self {
            source: source_of(sources, endpoint.logical),
            endpoint,
        }
    }
}

/// The source the driver found for `dst`. Loopback destinations use themselves (RFC 6724 §6
/// pairs them with loopback sources); a destination the driver said nothing about is treated
/// as having a matching source, so it keeps its DNS position.
fn source_of(sources: &[SourceOf], dst: IpAddr) -> Option<Source> {
    if let Some(s) = sources.iter().find(|s| s.dst == dst) {
        return s.source;
    }
    let len = if dst.is_ipv4() { 32 } else { 128 };
    Some(Source::new(dst, if dst.is_loopback() { len } else { 0 }))
}

/// The TLS step variant for an endpoint over `transport` of a service with ECH configuration
/// `ech`: 0 is the race's own step (TCP, no ECH); any other is the `n`-th of the race's extra
/// steps ([`Rare::tls_steps`]), added when it is first needed (and the rare parts with it).
/// A QUIC step offers `h3` alone (HEv3 §6.2, R-35: one ALPN list per transport).
fn tls_variant(
    base: &Arc<TlsStep>,
    rare: &mut Option<Box<Rare>>,
    ech: Option<&Arc<[u8]>>,
    transport: TransportKind,
) -> u16 {
    if ech.is_none() && transport == TransportKind::Tcp {
        return 0;
    }
    let alpn = match transport {
        TransportKind::Tcp => &base.alpn[..],
        TransportKind::Quic => TransportKind::QUIC_ALPN,
    };
    let steps = &mut rare.get_or_insert_default().tls_steps;
    let fits = |s: &Arc<TlsStep>| s.ech.as_deref() == ech.map(|e| &**e) && s.alpn == alpn;
    let i = steps.iter().position(fits).unwrap_or_else(|| {
        steps.push(Arc::new(TlsStep {
            ech: ech.cloned(),
            alpn: alpn.to_vec(),
            ..(**base).clone()
        }));
        steps.len() - 1
    });
    // A DNS message cannot hold 65 535 ECH configurations.
    u16::try_from(i + 1).unwrap_or(u16::MAX)
}

/// Puts a group's endpoints, each transport already sorted by RFC 6724 and route memory,
/// in the order `order` says (profile P11): the two transports alternating, `lead` first on
/// each address, or every `lead` endpoint first. QUIC leads unless route memory says it is
/// broken for the origin, and then TCP does.
fn merge_transports<T>(lead: Vec<T>, follow: Vec<T>, order: QuicOrder) -> impl Iterator<Item = T> {
    let mut out = Vec::with_capacity(lead.len() + follow.len());
    match order {
        QuicOrder::QuicFirst => {
            out.extend(lead);
            out.extend(follow);
        }
        QuicOrder::Interleaved => {
            let (mut lead, mut follow) = (lead.into_iter(), follow.into_iter());
            loop {
                let (a, b) = (lead.next(), follow.next());
                if a.is_none() && b.is_none() {
                    break;
                }
                out.extend(a);
                out.extend(b);
            }
        }
    }
    out.into_iter()
}

/// Adds candidate `c`'s endpoint to `target` over `transport` to the list, or marks the one
/// already there as listed again with the candidate's group and TLS step. Returns whether
/// the list changed in a way that calls for ordering it again. The same address, port and
/// transport in two groups is tried once, in the first.
fn upsert(
    endpoints: &mut SmallVec<[Endpoint; 2]>,
    c: &Candidate<'_>,
    target: SocketAddr,
    transport: TransportKind,
    tls_variant: u16,
) -> bool {
    let same = |e: &&mut Endpoint| e.target == target && e.transport == transport;
    match endpoints.iter_mut().find(same) {
        Some(e) if e.listed => false,
        Some(e) => {
            let moved = e.group != c.group;
            e.group = c.group;
            e.tls_variant = tls_variant;
            e.without_svcb = c.without_svcb;
            e.listed = true;
            moved
        }
        None => {
            endpoints.push(Endpoint {
                logical: c.ip,
                target,
                tried: false,
                group: c.group,
                without_svcb: c.without_svcb,
                tls_variant,
                listed: true,
                transport,
            });
            true
        }
    }
}

impl FastFallbackExchangeFinder {
    // ---- getters ----

    /// The current endpoint order, attempted ones included (for reports and tests).
    pub fn endpoint_order(&self) -> Vec<SocketAddr> {
        self.endpoints.iter().map(|e| e.target).collect()
    }

    // ---- internals ----

    /// Reconciles the endpoint list with the current DNS answers: new addresses are added,
    /// untried ones that disappeared are removed, attempted ones stay (HEv3 §7).
    pub(super) fn sync_endpoints(&mut self) {
        let origin_port = self.address.connect_host().1;
        let mut disallowed = Vec::<IpAddr>::new();
        let scope = self.address.scope_id().unwrap_or(0);
        let (policy, connectivity) = (&self.policy, &self.connectivity);
        let (tls, rare) = (&self.tls, &mut self.rare);
        let endpoints = &mut self.endpoints;
        // The first sync (every race's, and a literal's only one) has nothing to reconcile.
        let first = endpoints.is_empty();
        if !first {
            for e in endpoints.iter_mut() {
                e.listed = false;
            }
        }
        let mut changed = false;
        self.resolution.for_each_candidate(|c| {
            if !policy.family.allows(Family::of(c.ip)) {
                if !disallowed.contains(&c.ip) {
                    disallowed.push(c.ip);
                }
                return;
            }
            let port = c.port.unwrap_or(origin_port);
            let target = match connectivity.connect_ip(c.ip) {
                IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope)),
                v4 => SocketAddr::new(v4, port),
            };
            let mut add = |transport| {
                let variant = match tls {
                    Some(base) => tls_variant(base, rare, c.ech, transport),
                    None => 0,
                };
                changed |= upsert(endpoints, &c, target, transport, variant);
            };
            if c.tcp {
                add(TransportKind::Tcp);
            }
            if c.quic {
                add(TransportKind::Quic);
            }
        });
        // HEv3 §7: an attempted endpoint keeps its place; an untried one that left goes.
        if !first {
            let before = endpoints.len();
            endpoints.retain(|e| e.listed || e.tried);
            changed |= before != endpoints.len();
        }
        if !disallowed.is_empty() {
            self.note_disallowed(disallowed);
        }
        self.order_dirty |= changed;
    }

    /// Notes the addresses the policy's families left out, for the report and the error.
    fn note_disallowed(&mut self, disallowed: Vec<IpAddr>) {
        for ip in disallowed {
            let why = format!("the policy allows no {}", Family::of(ip));
            self.resolution
                .note_skipped(self.connectivity, ip.to_string(), why);
        }
    }

    /// Sorts the endpoints: group by group (RFC 9460 §2.4.1, HEv3 §4.3: a service's
    /// endpoints before those of the next), each group by RFC 6724 and route memory.
    pub(super) fn reorder(&mut self, now: Instant) {
        // One endpoint (every literal's) has nothing to be ordered against.
        if self.endpoints.len() > 1 {
            let ctx = OrderContext {
                memory: Some(&self.memory).filter(|m| m.is_enabled()),
                preference: self.policy.family,
                preferred_family_count: self.policy.preferred_family_count,
                slower_margin: self.policy.min_attempt_delay,
                now,
            };
            let first = self.endpoints[0].group;
            let tcp_only = self
                .endpoints
                .iter()
                .all(|e| e.transport == TransportKind::Tcp);
            if tcp_only && self.endpoints.iter().all(|e| e.group == first) {
                let sources = &self.sources;
                let sourced = self.endpoints.drain(..).map(|e| Sourced::new(e, sources));
                let sorted = order(sourced.collect(), &ctx);
                self.endpoints
                    .extend(sorted.into_iter().map(|s| s.endpoint));
            } else {
                let quic_order = self.policy.quic_order;
                // Broken-QUIC memory (HEv3 §5.3, R-21): TCP leads; QUIC still follows it.
                let quic_broken = ctx.memory.is_some_and(|m| m.is_quic_broken(now));
                let mut all: Vec<Endpoint> = self.endpoints.drain(..).collect();
                all.sort_by_key(|e| e.group);
                while !all.is_empty() {
                    let g = all[0].group;
                    let n = all.iter().take_while(|e| e.group == g).count();
                    let rest = all.split_off(n);
                    let sources = &self.sources;
                    let (quic, tcp) = all
                        .into_iter()
                        .map(|e| Sourced::new(e, sources))
                        .partition(|s| s.endpoint.transport == TransportKind::Quic);
                    let (quic, tcp) = (order(quic, &ctx), order(tcp, &ctx));
                    let (lead, follow) = if quic_broken {
                        (tcp, quic)
                    } else {
                        (quic, tcp)
                    };
                    let merged = merge_transports(lead, follow, quic_order);
                    self.endpoints.extend(merged.map(|s| s.endpoint));
                    all = rest;
                }
            }
        }
        self.order_dirty = false;
    }

    /// Whether endpoint `e` may start now: a QUIC endpoint waits while the race holds TLS
    /// for an HTTPS answer, as its one handshake carries the ClientHello (HEv3 §6.1, R-34).
    pub(super) fn startable(&self, e: &Endpoint) -> bool {
        !e.tried && (e.transport == TransportKind::Tcp || !self.resolution.holds_tls())
    }

    pub(super) fn has_candidate(&self) -> bool {
        !self.deferred().is_empty()
            || (self.resolution.moved_on() && self.endpoints.iter().any(|e| self.startable(e)))
    }
}
