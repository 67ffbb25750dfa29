//! DNS answer aggregation and the Resolution Delay (RFC 8305 §3, HEv3 §4.2).
//!
//! Each record type is handled on its own as it arrives (HEv3 §4.2: "do not wait for all
//! answers"). [`Resolution`] keeps the latest answer per type, the HTTPS hints, and decides when
//! the race may move on to connecting:
//!
//! > Move on as soon as either condition set holds (HEv3 §4.2):
//! > 1. a positive address answer has arrived, an answer (or hint) for the preferred family has
//! >    arrived, and the HTTPS answer has arrived or failed; or
//! > 2. a positive address answer has arrived and the Resolution Delay has passed since the first
//! >    one (reference profile P1: a further answer inside the delay does not restart it).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use fastfallback_proto::{
    Alpn, AlpnOffer, DnsAnswer, DnsError, Family, HttpsRecord, Instant, Query, QueryKind, QueryName,
};
use smallvec::SmallVec;

use crate::Nat64Prefix;
use crate::address::normalize_ip;

/// What the host can reach, as far as choosing queries and synthesizing addresses goes.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Connectivity {
    /// IPv6 connectivity: a non-link-local address and a non-link-local route (HEv3 §4.1).
    pub v6: bool,
    /// IPv4 connectivity.
    pub v4: bool,
    /// The NAT64 prefix, if one is known (HEv3 §8.1).
    pub nat64: Option<Nat64Prefix>,
}

impl Connectivity {
    /// A dual-stack host without NAT64.
    pub const DUAL_STACK: Self = Self {
        v6: true,
        v4: true,
        nat64: None,
    };

    /// Whether the host should look for a NAT64 prefix before a race
    /// ([`Nat64Prefix::DISCOVERY_NAME`], RFC 7050 §3): it has IPv6 only and knows no prefix,
    /// so without one it could reach no IPv4-only name or literal (HEv3 §8.1).
    ///
    /// ```
    /// use fastfallback_route::{Connectivity, Nat64Prefix};
    /// let v6_only = Connectivity { v6: true, v4: false, nat64: None };
    /// assert!(v6_only.needs_nat64_discovery());
    /// let known = Connectivity { nat64: Some(Nat64Prefix::WELL_KNOWN), ..v6_only };
    /// assert!(!known.needs_nat64_discovery());
    /// assert!(!Connectivity::DUAL_STACK.needs_nat64_discovery());
    /// ```
    pub fn needs_nat64_discovery(&self) -> bool {
        self.v6 && !self.v4 && self.nat64.is_none()
    }

    /// The family HEv3 §4.2 prefers: IPv6 when it has connectivity, else IPv4.
    pub fn preferred_family(&self) -> Family {
        if self.v6 { Family::V6 } else { Family::V4 }
    }

    /// The queries to send, in HEv3 §4.1 order: HTTPS (if `https`), AAAA when IPv6 works, A when
    /// IPv4 works or a NAT64 prefix is known (HEv3 §8.1: "MUST").
    pub fn queries(&self, https: bool) -> SmallVec<[QueryKind; 3]> {
        let mut q = SmallVec::new();
        if https {
            q.push(QueryKind::Https);
        }
        if self.v6 {
            q.push(QueryKind::Aaaa);
        }
        if self.v4 || self.nat64.is_some() {
            q.push(QueryKind::A);
        }
        q
    }

    /// Whether `ip` can be connected to: it is a loopback address (the host itself, whatever
    /// its global connectivity), its family works, or it is IPv4 and a NAT64 prefix can carry
    /// it (HEv3 §8.3).
    pub fn can_reach(&self, ip: IpAddr) -> bool {
        if ip.is_loopback() {
            return true;
        }
        match ip {
            IpAddr::V6(_) => self.v6,
            IpAddr::V4(v4) => {
                self.v4 || (self.v6 && self.nat64.is_some() && !Nat64Prefix::is_exempt(v4))
            }
        }
    }

    /// The destinations of `answer` as the race will see them: IPv4-mapped addresses as IPv4,
    /// DNS64-synthesized ones de-synthesized (HEv3 §8.2), HTTPS hints included. The driver
    /// finds a source for each ([`crate::SourceOf`]) and hands them in with the answer.
    pub fn destinations(&self, answer: &DnsAnswer) -> Vec<IpAddr> {
        let mut out = Vec::new();
        self.for_each_destination(answer, |ip| out.push(ip));
        out
    }

    /// [`Self::destinations`], one at a time, without building a list.
    pub fn for_each_destination(&self, answer: &DnsAnswer, mut f: impl FnMut(IpAddr)) {
        let logical = |ip: IpAddr| match (normalize_ip(ip), self.nat64) {
            (IpAddr::V6(v6), Some(p)) => p.extract(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
            (ip, _) => ip,
        };
        match answer {
            DnsAnswer::Addresses(list) => list.iter().for_each(|ip| f(logical(*ip))),
            DnsAnswer::Https(records) => {
                for r in records {
                    let v6 = r.ipv6hint.iter().map(|v| IpAddr::V6(*v));
                    v6.chain(r.ipv4hint.iter().map(|v| IpAddr::V4(*v)))
                        .for_each(|ip| f(logical(ip)));
                }
            }
            DnsAnswer::Error(_) => {}
        }
    }

    /// The address a socket connects to for `logical`: the NAT64-synthesized one when IPv4 has
    /// no route and a prefix is known (HEv3 §8.3), else `logical` itself.
    pub fn connect_ip(&self, logical: IpAddr) -> IpAddr {
        match (logical, self.nat64) {
            (IpAddr::V4(v4), Some(p)) if !self.v4 && !Nat64Prefix::is_exempt(v4) => {
                IpAddr::V6(p.synthesize(v4))
            }
            _ => logical,
        }
    }
}

/// Limits applied to answers.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct AnswerLimits {
    /// The most addresses taken from one answer; the rest are skipped and reported.
    pub max_addresses: usize,
}

impl Default for AnswerLimits {
    fn default() -> Self {
        Self { max_addresses: 32 }
    }
}

/// The most skipped addresses and records a resolution keeps, with their reasons; the rest
/// are only counted ([`Resolution::skipped_more`]).
pub const MAX_SKIPPED_LISTED: usize = 16;

/// What a resolution skipped: the first [`MAX_SKIPPED_LISTED`], and a count of the rest (an
/// answer of 100 000 addresses must not make an error of megabytes).
#[derive(Clone, Debug, Default)]
struct SkippedList {
    listed: Vec<Skipped>,
    more: usize,
}

/// An address (or record) skipped before any attempt, and why. Reported in the race's error.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Skipped {
    /// What was skipped.
    pub what: String,
    /// Why.
    pub why: String,
}

/// What a compatible HTTPS record tells a TCP client (RFC 9460 §7).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ServiceInfo {
    /// The name whose A and AAAA answers are the service's addresses: the record's TargetName,
    /// or its owner for `"."` (RFC 9460 §2.5).
    pub name: QueryName,
    /// The `port` SvcParam (RFC 9460 §7.2).
    pub port: Option<u16>,
    /// Its ALPN set, defaults included (RFC 9460 §7.1.2).
    pub alpn: Vec<Alpn>,
    /// Its ECH configuration, when the record has one and the client uses ECH.
    pub ech: Option<Arc<[u8]>>,
    /// Whether the client reaches it over TCP: its ALPN set holds a protocol the client
    /// speaks over TCP (RFC 9460 §7.1.2, HEv3 §6.2).
    pub tcp: bool,
    /// Whether the client reaches it over QUIC too: the client speaks QUIC, the ALPN set
    /// holds `h3`, and the service has no ECH configuration (ECH over QUIC is not built, and
    /// a service with ECH is never reached without it).
    pub quic: bool,
}

/// One address the race may connect to, with the service it belongs to.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Candidate<'a> {
    /// The logical address (see [`Connectivity::destinations`]).
    pub ip: IpAddr,
    /// The port the service names, if it names one (RFC 9460 §7.2).
    pub port: Option<u16>,
    /// The priority group: services in the order their records are tried (RFC 9460 §2.4.1,
    /// HEv3 §4.3), then the origin's own addresses on its own port. Lower goes first.
    pub group: u16,
    /// Whether this is the origin's own address on its own port, listed after every
    /// compatible service's endpoints so that the race connects without SVCB when they all
    /// fail (RFC 9460 §3: "the client now attempts to use non-SVCB connection modes"). False
    /// when no compatible HTTPS record came (then nothing is a fallback).
    pub without_svcb: bool,
    /// The service's ECH configuration, if it has one (draft-ietf-tls-svcb-ech §4).
    pub ech: Option<&'a Arc<[u8]>>,
    /// Whether it is reached over TCP ([`ServiceInfo::tcp`]; always for the origin's own
    /// addresses).
    pub tcp: bool,
    /// Whether it is reached over QUIC ([`ServiceInfo::quic`]; for the origin's own
    /// addresses only at the ports of its Alt-Svc alternatives,
    /// [`Resolution::with_alternatives`]).
    pub quic: bool,
}

/// The longest AliasMode chain followed (RFC 9460 §3.1 asks for a limit; 8 is what Chromium and
/// the DNS resolvers that follow aliases use).
pub const MAX_ALIAS_CHAIN: usize = 8;

/// The most names besides the origin one race asks about (alias targets and service
/// TargetNames together): an HTTPS answer can list any number of TargetNames, and each costs
/// two queries. Records beyond it are skipped with a reason.
pub const MAX_TARGET_NAMES: usize = 16;

#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum QueryState {
    NotSent,
    Pending,
    Answered {
        positive: bool,
    },
    /// The race stopped waiting for it (after a win's DNS tail, or a failure).
    Abandoned,
}

/// One family's admitted addresses: most answers hold one or two, kept inline.
type Addrs = SmallVec<[IpAddr; 2]>;

/// The queries and answers for one name: the origin, an alias target or a service's target.
#[derive(Clone, Debug)]
struct NameState {
    name: QueryName,
    state: [QueryState; 3],
    aaaa: Option<Addrs>,
    a: Option<Addrs>,
}

impl NameState {
    fn new(name: QueryName) -> Self {
        Self {
            name,
            state: [QueryState::NotSent; 3],
            aaaa: None,
            a: None,
        }
    }
}

/// The name table: the origin (index 0), then every other name in the order it appeared. The
/// origin is kept inline and the others in a `Vec`, so a race that asks only about its origin
/// allocates nothing for the table and indexes it without a spill check.
#[derive(Clone, Debug)]
struct Names {
    origin: NameState,
    targets: Vec<NameState>,
}

impl Names {
    fn len(&self) -> usize {
        1 + self.targets.len()
    }

    fn iter(&self) -> impl Iterator<Item = &NameState> {
        std::iter::once(&self.origin).chain(&self.targets)
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut NameState> {
        std::iter::once(&mut self.origin).chain(&mut self.targets)
    }

    fn position(&self, name: &QueryName) -> Option<usize> {
        match name {
            QueryName::Origin => Some(0),
            _ => self
                .targets
                .iter()
                // RFC 4343 §2, RFC 1034 §3.1: case and a trailing dot do not tell names apart.
                .position(|s| s.name.same_name(name))
                .map(|i| i + 1),
        }
    }

    fn push(&mut self, state: NameState) {
        self.targets.push(state);
    }
}

impl std::ops::Index<usize> for Names {
    type Output = NameState;
    fn index(&self, i: usize) -> &NameState {
        match i {
            0 => &self.origin,
            _ => &self.targets[i - 1],
        }
    }
}

impl std::ops::IndexMut<usize> for Names {
    fn index_mut(&mut self, i: usize) -> &mut NameState {
        match i {
            0 => &mut self.origin,
            _ => &mut self.targets[i - 1],
        }
    }
}

/// A compatible ServiceMode record, as the race uses it.
#[derive(Clone, Debug)]
struct Service {
    info: ServiceInfo,
    /// Index of `info.name` in `Resolution::names`.
    name: usize,
    /// Its admitted address hints, IPv6 first.
    hints: Vec<IpAddr>,
}

/// Aggregates the answers of one race's queries. No I/O; every input carries `now`.
#[derive(Clone, Debug)]
pub struct Resolution {
    /// The origin first; then every alias target and service target, as they appear.
    names: Names,
    /// The origin's name, for telling an alias loop (set when HTTPS records are queried).
    origin: Option<Box<str>>,
    /// The name whose HTTPS answer counts: the end of the alias chain so far.
    chain_end: u8,
    alias_links: u8,
    services: Vec<Service>,
    /// Queries the answers asked for that the race has not sent yet.
    unsent: Vec<Query>,
    conn: Connectivity,
    preferred: Family,
    /// Families whose addresses were skipped because the host has no route for them.
    unroutable: [bool; 2],
    limits: AnswerLimits,
    resolution_delay: Duration,
    first_positive_at: Option<Instant>,
    moved_on: bool,
    /// Inline for the first: a name with one family answers one query empty, and that entry
    /// should not cost an allocation per race.
    errors: SmallVec<[(Query, Option<DnsError>); 1]>,
    /// What was skipped; boxed, as most races skip nothing and the finder's size counts.
    skipped: Option<Box<SkippedList>>,
    /// What the client offers in ALPN: HTTPS records with none of it are skipped.
    offer: AlpnOffer,
    /// Seeds the shuffle of equal-priority HTTPS records and the pick among aliases.
    seed: u64,
    /// Whether the client uses the `ech` SvcParam (draft-ietf-tls-svcb-ech).
    ech: bool,
    /// Whether the client speaks HTTP/3 over QUIC: records listing `h3` are compatible.
    quic: bool,
    /// The ports of the origin's `h3` alternatives on its own host (RFC 7838 Alt-Svc), in the
    /// server's order: QUIC endpoints on the origin's addresses when no HTTPS record speaks
    /// for it ([`Self::with_alternatives`]).
    alternatives: SmallVec<[u16; 1]>,
}

fn idx(k: QueryKind) -> usize {
    match k {
        QueryKind::Https => 0,
        QueryKind::Aaaa => 1,
        QueryKind::A => 2,
    }
}

/// A TargetName as a query name: lower case, without the trailing dot, checked to be a host
/// name (the network may send anything).
fn target_name(raw: &str) -> Result<Arc<String>, String> {
    match raw.parse::<crate::Host>() {
        Ok(crate::Host::Name(n)) => Ok(Arc::new(n)),
        Ok(crate::Host::Ip(_)) => Err(format!("TargetName {raw:?} is an address, not a name")),
        Err(e) => Err(format!("TargetName {raw:?} is not a host name: {e}")),
    }
}

impl Resolution {
    /// Aggregation for `queries` (all sent at once, HEv3 §4.1). `preferred` is the family
    /// whose answer the move-on rule waits for (HEv3 §4.2: IPv6 when both families have a
    /// route; a policy that puts IPv4 first makes it IPv4).
    pub fn new(
        queries: &[QueryKind],
        conn: Connectivity,
        preferred: Family,
        resolution_delay: Duration,
        limits: AnswerLimits,
    ) -> Self {
        let mut origin = NameState::new(QueryName::Origin);
        for &q in queries {
            origin.state[idx(q)] = QueryState::Pending;
        }
        Self {
            names: Names {
                origin,
                targets: Vec::new(),
            },
            origin: None,
            chain_end: 0,
            alias_links: 0,
            services: Vec::new(),
            unsent: Vec::new(),
            conn,
            preferred,
            unroutable: [false; 2],
            limits,
            resolution_delay,
            first_positive_at: None,
            moved_on: false,
            errors: SmallVec::new(),
            skipped: None,
            offer: AlpnOffer::Both,
            seed: 0,
            ech: false,
            quic: false,
            alternatives: SmallVec::new(),
        }
    }

    /// The same aggregation for an ECH-capable client: services keep their `ech`
    /// configuration, and when every compatible service has one the client is SVCB-reliant
    /// (draft-ietf-tls-esni "Disabling fallback"): the origin's own addresses, which would be
    /// reached without ECH, are not used. An ECH-capable client sends no ClientHello before
    /// SVCB resolution has finished (draft-ietf-tls-esni, "Performance optimizations"): while
    /// an HTTPS query is pending, attempts hold their TLS step ([`Self::holds_tls`]); the race
    /// bounds that wait and then calls [`Self::give_up_https`].
    #[must_use]
    pub fn ech_capable(mut self, ech: bool) -> Self {
        self.ech = ech;
        self
    }

    /// Whether an HTTPS query of the alias chain is still unanswered.
    fn https_pending(&self) -> bool {
        let pending = |s: &NameState| s.state[0] == QueryState::Pending;
        pending(&self.names.origin) || self.names.targets.iter().any(pending)
    }

    /// Whether an attempt started now must hold its TLS step: the client is ECH-capable and
    /// an HTTPS answer is still pending.
    pub fn holds_tls(&self) -> bool {
        self.ech && self.https_pending()
    }

    /// Gives up on the pending HTTPS answer (the HTTPS wait is over): SVCB resolution has
    /// failed as far as this race goes, and held attempts go on without ECH. A later answer is
    /// still taken (HEv3 §7) for the endpoints not tried yet.
    pub fn give_up_https(&mut self) {
        let mut gave_up = false;
        for s in self.names.iter_mut() {
            if s.state[0] == QueryState::Pending {
                s.state[0] = QueryState::Abandoned;
                gave_up = true;
            }
        }
        if gave_up {
            self.skip(
                "HTTPS query",
                "no answer within the HTTPS wait; TLS went ahead without ECH",
            );
        }
    }

    /// Whether every compatible service carries ECH, so that no fallback without it is made.
    pub fn svcb_reliant(&self) -> bool {
        self.ech && !self.services.is_empty() && self.services.iter().all(|s| s.info.ech.is_some())
    }

    /// Seeds the shuffle of HTTPS records of equal priority (RFC 9460 §2.4.1) and the pick
    /// among several AliasMode records (§2.4.2); the same seed gives the same order.
    #[must_use]
    pub fn seeded(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Names the origin, so that an alias chain leading back to it is seen as a loop
    /// (RFC 9460 §3.1), and a TargetName equal to it shares its answers.
    #[must_use]
    pub fn named(mut self, origin: &str) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// The same aggregation for a client that offers `offer` in ALPN (default: both `h2` and
    /// `http/1.1`): HTTPS records advertising none of it are skipped (RFC 9460 §7.1.2).
    #[must_use]
    pub fn offering(mut self, offer: AlpnOffer) -> Self {
        self.offer = offer;
        self
    }

    /// The same aggregation for a client that speaks HTTP/3 over QUIC: a record whose ALPN
    /// set holds `h3` is compatible even when it lists nothing the client speaks over TCP,
    /// and its service is reached over QUIC as well ([`ServiceInfo::quic`]; HEv3 §6.2).
    #[must_use]
    pub fn speaking_quic(mut self, quic: bool) -> Self {
        self.quic = quic;
        self
    }

    /// The same aggregation for an origin whose responses named HTTP/3 alternatives on its
    /// own host at `ports` (RFC 7838 Alt-Svc, kept by route memory). For a client that speaks
    /// QUIC, the origin's own addresses are then reached over QUIC at those ports too, ahead
    /// of TCP on each address (profile P11) — but only once the HTTPS answer is in (or was
    /// never asked for) and no compatible record came: a client that reads both Alt-Svc and
    /// HTTPS records attempts only what both allow (HEv3 §6.2, RFC 9460 §9.3, R-37), and a
    /// record that speaks for the origin decides its transports.
    #[must_use]
    pub fn with_alternatives(mut self, ports: impl IntoIterator<Item = u16>) -> Self {
        self.alternatives = ports.into_iter().collect();
        self
    }

    /// Aggregation for addresses known without DNS (an IP literal, or the loopback addresses
    /// of `localhost`): no queries, ready at once. `scoped` says the literal carries a zone,
    /// which makes a link-local address usable.
    pub fn fixed(ips: &[IpAddr], scoped: bool, conn: Connectivity) -> Self {
        let mut r = Self::new(
            &[],
            conn,
            conn.preferred_family(),
            Duration::ZERO,
            AnswerLimits::default(),
        );
        let (mut v6, mut v4) = (Addrs::new(), Addrs::new());
        for &ip in ips {
            let ip = normalize_ip(ip);
            let list = match Family::of(ip) {
                Family::V6 => &mut v6,
                Family::V4 => &mut v4,
            };
            if scoped {
                r.admit_scoped(ip, list);
            } else {
                r.admit(std::iter::once(ip), list);
            }
        }
        r.names[0].aaaa = Some(v6);
        r.names[0].a = Some(v4);
        r.moved_on = true;
        r
    }

    /// Whether [`Self::fixed`] takes the unscoped literal `ip` exactly as it is: not
    /// IPv4-mapped, not a NAT64 address it would unwrap, a valid destination, and one the host
    /// can reach. Such a literal leaves nothing to resolve and nothing to explain, so a race
    /// may keep the address alone instead of an aggregation built for it.
    pub fn takes_literal_as_is(ip: IpAddr, conn: Connectivity) -> bool {
        let unwrapped = match (ip, conn.nat64) {
            (IpAddr::V6(v6), Some(p)) => p.extract(v6).is_some(),
            _ => false,
        };
        normalize_ip(ip) == ip
            && !unwrapped
            && invalid_destination(ip).is_none()
            && conn.can_reach(ip)
    }

    /// Aggregation for one IP literal (see [`Self::fixed`]).
    pub fn literal(ip: IpAddr, conn: Connectivity) -> Self {
        Self::fixed(&[ip], false, conn)
    }

    /// Admits a literal that carries a zone: link-local is fine then (RFC 4007 §11).
    fn admit_scoped(&mut self, ip: IpAddr, out: &mut Addrs) {
        match invalid_destination(ip) {
            Some(why) if why != LINK_LOCAL_WITHOUT_SCOPE => self.skip(ip.to_string(), why),
            _ => out.push(ip),
        }
    }

    /// Takes in one answer. Answers to queries that were never sent, or repeated answers, are
    /// accepted: a repeated answer replaces the previous one (HEv3 §7, answers changing).
    /// An answer about a name the race never asked for is ignored.
    pub fn handle_answer(&mut self, query: &Query, answer: &DnsAnswer, now: Instant) {
        let Some(n) = self.names.position(&query.name) else {
            return;
        };
        let kind = query.kind;
        let positive = match answer {
            DnsAnswer::Error(e) => {
                self.errors.push((query.clone(), Some(e.clone())));
                if kind == QueryKind::Https {
                    self.take_https(n, &[]);
                }
                false
            }
            DnsAnswer::Addresses(list) if kind == QueryKind::Https => {
                self.skip(
                    format!("{} addresses", list.len()),
                    "address list on an HTTPS query",
                );
                false
            }
            DnsAnswer::Addresses(list) => {
                let mut admitted = Addrs::with_capacity(list.len().min(self.limits.max_addresses));
                self.admit(list.iter().copied(), &mut admitted);
                let list = admitted;
                if list.is_empty() {
                    self.errors.push((query.clone(), None));
                }
                let positive = !list.is_empty();
                if kind == QueryKind::Aaaa {
                    self.names[n].aaaa = Some(list);
                } else {
                    self.names[n].a = Some(list);
                }
                positive
            }
            DnsAnswer::Https(records) => self.take_https(n, records),
        };
        self.names[n].state[idx(kind)] = QueryState::Answered { positive };
        if positive && self.first_positive_at.is_none() {
            self.first_positive_at = Some(now);
        }
    }

    fn skip(&mut self, what: impl Into<String>, why: impl Into<String>) {
        let list = self.skipped.get_or_insert_default();
        if list.listed.len() == MAX_SKIPPED_LISTED {
            list.more += 1;
            return;
        }
        list.listed.push(Skipped {
            what: what.into(),
            why: why.into(),
        });
    }

    /// Filters addresses into `out`: normalizes IPv4-mapped addresses, drops invalid
    /// destinations (each with a reason), de-synthesizes NAT64 addresses (HEv3 §8.2) and caps
    /// the length.
    fn admit<const N: usize>(
        &mut self,
        list: impl IntoIterator<Item = IpAddr>,
        out: &mut SmallVec<[IpAddr; N]>,
    ) {
        for ip in list {
            let mut ip = normalize_ip(ip);
            if let (IpAddr::V6(v6), Some(p)) = (ip, self.conn.nat64)
                && let Some(v4) = p.extract(v6)
            {
                ip = IpAddr::V4(v4);
            }
            if let Some(why) = invalid_destination(ip) {
                self.skip(ip.to_string(), why);
                continue;
            }
            if !self.conn.can_reach(ip) {
                let family = Family::of(ip);
                self.unroutable[family_slot(family)] = true;
                self.skip(
                    ip.to_string(),
                    format!("the host has no {family} connectivity"),
                );
                continue;
            }
            if out.contains(&ip) {
                continue;
            }
            if out.len() == self.limits.max_addresses {
                self.skip(
                    ip.to_string(),
                    format!("answer capped at {}", self.limits.max_addresses),
                );
                continue;
            }
            out.push(ip);
        }
    }

    /// The index of `name` in the name table, adding it (and queueing its queries: HTTPS if
    /// `https`, and the address queries the host's connectivity calls for) if it is new.
    /// `None` when [`MAX_TARGET_NAMES`] names are known already.
    fn name_index(&mut self, name: Arc<String>, https: bool) -> Option<usize> {
        if self.origin.as_deref() == Some(name.as_str()) {
            return Some(0);
        }
        let name = QueryName::Target(name);
        if let Some(i) = self.names.position(&name) {
            return Some(i);
        }
        if self.names.len() > MAX_TARGET_NAMES {
            return None;
        }
        let mut state = NameState::new(name.clone());
        let kinds = self.conn.queries(https);
        for kind in kinds {
            state.state[idx(kind)] = QueryState::Pending;
            self.unsent.push(Query {
                kind,
                name: name.clone(),
            });
        }
        self.names.push(state);
        Some(self.names.len() - 1)
    }

    /// Whether `name` is the origin or a name already on the alias chain (whose HTTPS
    /// records were asked for): following it again would loop.
    fn on_chain(&self, name: &Arc<String>) -> bool {
        self.origin.as_deref() == Some(name.as_str())
            || self.names.iter().any(|s| {
                s.state[0] != QueryState::NotSent
                    && matches!(&s.name, QueryName::Target(t) if t == name)
            })
    }

    /// Takes the HTTPS RRset of name `n` (empty for NODATA or a failure). Returns whether it
    /// brought a usable address hint.
    fn take_https(&mut self, n: usize, records: &[HttpsRecord]) -> bool {
        if n != usize::from(self.chain_end) {
            // An answer for an earlier link of an alias chain: the chain has moved on.
            return false;
        }
        self.services.clear();
        let aliases: SmallVec<[&HttpsRecord; 1]> =
            records.iter().filter(|r| r.is_alias()).collect();
        if !aliases.is_empty() {
            // RFC 9460 §2.4.2: ServiceMode records beside an alias are ignored, and one of
            // several aliases is picked at random.
            self.seed = crate::splitmix64(self.seed);
            let alias = aliases[(self.seed % aliases.len() as u64) as usize];
            let what = format!("HTTPS AliasMode record {:?}", alias.target);
            let target = if alias.targets_owner() {
                // RFC 9460 §2.5.1: an alias to "." says the service does not exist.
                Err("AliasMode to \".\": the service is unavailable".to_owned())
            } else {
                target_name(&alias.target)
            };
            match target {
                Err(why) => self.skip(what, why),
                Ok(_) if usize::from(self.alias_links) == MAX_ALIAS_CHAIN => self.skip(
                    what,
                    format!("alias chain longer than {MAX_ALIAS_CHAIN} links"),
                ),
                Ok(name) if self.on_chain(&name) => {
                    self.skip(what, "alias loop (RFC 9460 §3.1)");
                }
                Ok(name) => {
                    // RFC 9460 §3 step 3: ask the same questions about the TargetName.
                    let Some(i) = self.name_index(name, true) else {
                        self.skip(
                            what,
                            format!("more than {MAX_TARGET_NAMES} names to ask about"),
                        );
                        return false;
                    };
                    self.alias_links += 1;
                    if self.names[i].state[0] != QueryState::Pending {
                        // Known already as a service target: ask for its HTTPS records too.
                        self.names[i].state[0] = QueryState::Pending;
                        let name = self.names[i].name.clone();
                        self.unsent.push(Query {
                            kind: QueryKind::Https,
                            name,
                        });
                    }
                    // Below MAX_TARGET_NAMES + 1, so it fits.
                    self.chain_end = u8::try_from(i).unwrap_or(u8::MAX);
                }
            }
            // A broken chain is an SVCB resolution failure (RFC 9460 §3): no service, so the
            // origin's own addresses are used.
            return false;
        }
        let mut compatible: Vec<(&HttpsRecord, Vec<Alpn>, (bool, bool))> =
            Vec::with_capacity(records.len());
        for r in records {
            let mut alpn = r.alpn.clone();
            if !r.no_default_alpn && !alpn.contains(&Alpn::Http11) {
                alpn.push(Alpn::Http11);
            }
            let reach = self.transports(&alpn, r.ech.is_some());
            if r.port == Some(0) {
                // RFC 9460 §7.2: the port to connect to; 0 is no port at all.
                self.skip(format!("HTTPS record {}", r.priority), "port=0");
            } else if let Some(why) = &r.malformed {
                self.skip(format!("HTTPS record {}", r.priority), why.clone());
            } else if r.unknown_mandatory {
                self.skip(
                    format!("HTTPS record {}", r.priority),
                    "unknown mandatory SvcParam",
                );
            } else if reach == (false, false) {
                // RFC 9460 §7.1.2, HEv3 §6.2: no protocol we speak.
                let why = if self.quic && alpn.contains(&Alpn::H3) {
                    "no supported ALPN (h3 only, and QUIC with ECH is not built)"
                } else {
                    "no supported ALPN"
                };
                self.skip(format!("HTTPS record {}", r.priority), why);
            } else {
                compatible.push((r, alpn, reach));
            }
        }
        compatible.sort_by_key(|(r, ..)| r.priority);
        // RFC 9460 §2.4.1: records of equal priority are tried in random order. Fisher–Yates
        // within each run of equal priority, driven by the race's seed.
        // (Mixed with a constant, so it is not the draw that decides whether history is
        // ignored.)
        let mut state = self.seed ^ 0x5348_5546_464c_4521;
        let mut start = 0;
        while start < compatible.len() {
            let p = compatible[start].0.priority;
            let end = start
                + compatible[start..]
                    .iter()
                    .take_while(|(r, ..)| r.priority == p)
                    .count();
            for i in (start + 1..end).rev() {
                state = crate::splitmix64(state);
                let j = start + (state % (i - start + 1) as u64) as usize;
                compatible.swap(i, j);
            }
            start = end;
        }
        let mut any_hint = false;
        for (r, alpn, (tcp, quic)) in compatible {
            let name = if r.targets_owner() {
                n
            } else {
                match target_name(&r.target) {
                    // RFC 9460 §3: the addresses of a ServiceMode TargetName are asked for.
                    Ok(t) => match self.name_index(t, false) {
                        Some(i) => i,
                        None => {
                            self.skip(
                                format!("HTTPS record {}", r.priority),
                                format!("more than {MAX_TARGET_NAMES} names to ask about"),
                            );
                            continue;
                        }
                    },
                    Err(why) => {
                        self.skip(format!("HTTPS record {}", r.priority), why);
                        continue;
                    }
                }
            };
            let mut raw = Vec::with_capacity(r.ipv6hint.len() + r.ipv4hint.len());
            raw.extend(r.ipv6hint.iter().map(|&v| IpAddr::V6(v)));
            raw.extend(r.ipv4hint.iter().map(|&v| IpAddr::V4(v)));
            let mut hints = SmallVec::<[IpAddr; 0]>::with_capacity(raw.len());
            self.admit(raw, &mut hints);
            any_hint |= !hints.is_empty();
            self.services.push(Service {
                info: ServiceInfo {
                    name: self.names[name].name.clone(),
                    port: r.port,
                    alpn,
                    ech: r.ech.clone().filter(|_| self.ech),
                    tcp,
                    quic,
                },
                name,
                hints: hints.into_vec(),
            });
        }
        self.end_of_chain_service(n);
        any_hint
    }

    /// Which transports reach a service with ALPN set `alpn` (defaults included), and with
    /// an ECH configuration if `ech` (RFC 9460 §7.1.2, HEv3 §6.2): TCP when the set holds a
    /// protocol the client speaks over TCP; QUIC when the client speaks QUIC, the set holds
    /// `h3`, and the client would not use ECH on it (ECH over QUIC is not built, so a
    /// service with ECH is reached over TCP only, never without ECH).
    fn transports(&self, alpn: &[Alpn], ech: bool) -> (bool, bool) {
        let tcp = alpn.iter().any(|a| self.offer.speaks(a));
        let quic = self.quic && alpn.contains(&Alpn::H3) && !(ech && self.ech);
        (tcp, quic)
    }

    /// RFC 9460 §2.4.2: an alias chain that ends on a name with no usable ServiceMode record
    /// leads to that name's own A and AAAA records, as one service ahead of the origin's.
    fn end_of_chain_service(&mut self, n: usize) {
        let end = usize::from(self.chain_end);
        let settled = end == n;
        if settled && end != 0 && self.services.is_empty() {
            self.services.push(Service {
                info: ServiceInfo {
                    name: self.names[end].name.clone(),
                    port: None,
                    alpn: self.offer.ids().to_vec(),
                    ech: None,
                    tcp: true,
                    quic: false,
                },
                name: end,
                hints: Vec::new(),
            });
        }
    }

    /// The queries answers have called for since the last call (alias targets, service
    /// targets), to be sent now; they already count as pending.
    pub fn take_queries(&mut self) -> std::vec::Drain<'_, Query> {
        self.unsent.drain(..)
    }

    /// Drops the queries answers have called for but that were not sent (after a win, the
    /// DNS tail starts nothing): they no longer count as pending.
    pub fn abandon_unsent(&mut self) {
        for q in std::mem::take(&mut self.unsent) {
            if let Some(s) = self.names.iter_mut().find(|s| s.name == q.name) {
                s.state[idx(q.kind)] = QueryState::Abandoned;
            }
        }
    }

    /// Re-evaluates the move-on rule at `now`. Once it holds it keeps holding.
    pub fn poll(&mut self, now: Instant) -> bool {
        if self.moved_on {
            return true;
        }
        let Some(first) = self.first_positive_at else {
            return false;
        };
        let pref = self.preferred;
        let pref_kind = if pref == Family::V6 {
            QueryKind::Aaaa
        } else {
            QueryKind::A
        };
        // Condition set 1 of HEv3 §4.2 (R-08): the origin's preferred-family query has
        // answered; or the query of a compatible service's TargetName has, positively or
        // negatively (NODATA is an answer too); or a hint for that family came for a service
        // (reference profile P10); or an alias target answered it positively.
        let answered = |n: usize| {
            matches!(
                self.names[n].state[idx(pref_kind)],
                QueryState::Answered { .. }
            )
        };
        let pref_answered = !matches!(self.names[0].state[idx(pref_kind)], QueryState::Pending)
            || self
                .services
                .iter()
                .any(|s| answered(s.name) || s.hints.iter().any(|ip| Family::of(*ip) == pref))
            || self.names.targets.iter().any(|s| {
                matches!(
                    s.state[idx(pref_kind)],
                    QueryState::Answered { positive: true }
                )
            });
        // Service resolution is done when no HTTPS query of the alias chain is pending.
        let https_done = !self.https_pending();
        // Our reading where the profile is silent: when the first service's addresses come
        // from a TargetName of its own and it has no hint, its preferred-family answer is
        // awaited too (still bounded by the Resolution Delay), so the origin's fallback
        // addresses do not go first just because they were asked for earlier.
        let top_ready = self.services.first().is_none_or(|s| {
            s.name == 0
                || !s.hints.is_empty()
                || self.names[s.name].state[idx(pref_kind)] != QueryState::Pending
        });
        let set1 = pref_answered && https_done && top_ready;
        let set2 = now >= first + self.resolution_delay;
        self.moved_on = set1 || set2;
        self.moved_on
    }

    /// The Resolution Delay deadline, while it is running.
    pub fn deadline(&self) -> Option<Instant> {
        if self.moved_on {
            return None;
        }
        self.first_positive_at.map(|t| t + self.resolution_delay)
    }

    /// Whether the race may connect (the last [`Resolution::poll`] said so).
    pub fn moved_on(&self) -> bool {
        self.moved_on
    }

    /// The current address set, in DNS order and without repeats: see
    /// [`Self::for_each_candidate`].
    pub fn addresses(&self) -> Vec<IpAddr> {
        let mut out = Vec::new();
        self.for_each_candidate(|c| {
            if !out.contains(&c.ip) {
                out.push(c.ip);
            }
        });
        out
    }

    /// Calls `f` with every candidate, group by group: each compatible service's addresses
    /// in record order, then the origin's own addresses on its own port (RFC 9460 §3: the
    /// connection without SVCB when every service's endpoints fail; none when the client is
    /// SVCB-reliant, [`Self::svcb_reliant`]). Per name
    /// and family, the real answer if one arrived, else the service's hints (HEv3 §7: real
    /// records replace hints); IPv6 first, then IPv4. A candidate may come twice (the caller
    /// de-duplicates, keeping the first).
    pub fn for_each_candidate<'a>(&'a self, mut f: impl FnMut(Candidate<'a>)) {
        // HEv3 §7: a real answer replaces its family's hints, an empty one too, unless that
        // would leave no address at all: then the hints stay (a race never fails with "no
        // addresses" while a usable hint remains).
        let any_hint = self.services.iter().any(|s| !s.hints.is_empty());
        let mut keep_hints = false;
        if any_hint {
            let mut none = true;
            self.visit(false, |_| none = false);
            keep_hints = none;
        }
        self.visit(keep_hints, &mut f);
    }

    fn visit<'a>(&'a self, keep_hints: bool, mut f: impl FnMut(Candidate<'a>)) {
        let mut group = 0u16;
        for s in &self.services {
            self.visit_name(&self.names[s.name], &s.hints, keep_hints, |ip| {
                f(Candidate {
                    ip,
                    port: s.info.port,
                    group,
                    ech: s.info.ech.as_ref(),
                    without_svcb: false,
                    tcp: s.info.tcp,
                    quic: s.info.quic,
                })
            });
            group = group.saturating_add(1);
        }
        // RFC 9460 §3 (S-07): the origin's own addresses on its own port come last, even when
        // a "." record listed them already (maybe on another port: the race tries an address
        // and port once, in its first group). Not when every service carries ECH: then the
        // client is SVCB-reliant and never connects without it (RFC 9848, "Disabling
        // fallback", E-01).
        if !self.svcb_reliant() {
            let without_svcb = !self.services.is_empty();
            // Alt-Svc's QUIC alternatives, ahead of TCP, when nothing in DNS contradicts
            // them (R-37: no compatible record, and none still to come).
            let alt_svc = self.quic && self.services.is_empty() && !self.https_pending();
            for &port in self.alternatives.iter().filter(|_| alt_svc) {
                self.visit_name(&self.names[0], &[], keep_hints, |ip| {
                    f(Candidate {
                        ip,
                        port: Some(port),
                        group,
                        ech: None,
                        without_svcb: false,
                        tcp: false,
                        quic: true,
                    })
                });
            }
            self.visit_name(&self.names[0], &[], keep_hints, |ip| {
                f(Candidate {
                    ip,
                    port: None,
                    group,
                    ech: None,
                    without_svcb,
                    tcp: true,
                    quic: false,
                })
            });
        }
    }

    fn visit_name(
        &self,
        ns: &NameState,
        hints: &[IpAddr],
        keep_hints: bool,
        mut f: impl FnMut(IpAddr),
    ) {
        for fam in Family::ALL {
            let real = if fam == Family::V6 { &ns.aaaa } else { &ns.a };
            let source: &[IpAddr] = match real.as_deref() {
                Some([]) if keep_hints => hints,
                Some(list) => list,
                None => hints,
            };
            source
                .iter()
                .copied()
                .filter(|ip| Family::of(*ip) == fam)
                .for_each(&mut f);
            // De-synthesized DNS64 answers (HEv3 §8.2) land in the AAAA list as IPv4.
            if fam == Family::V4
                && let Some(list) = &ns.aaaa
            {
                list.iter()
                    .copied()
                    .filter(|ip| ip.is_ipv4())
                    .for_each(&mut f);
            }
        }
    }

    /// When the first positive answer (or usable hint) arrived, if one has.
    pub fn first_positive_at(&self) -> Option<Instant> {
        self.first_positive_at
    }

    /// Whether any query is still unanswered.
    pub fn pending(&self) -> bool {
        let pending = |s: &NameState| s.state.contains(&QueryState::Pending);
        pending(&self.names.origin) || self.names.targets.iter().any(pending)
    }

    /// The queries still unanswered.
    pub fn pending_queries(&self) -> Vec<Query> {
        let mut out = Vec::new();
        for s in self.names.iter() {
            for kind in QueryKind::ALL {
                if s.state[idx(kind)] == QueryState::Pending {
                    out.push(Query {
                        kind,
                        name: s.name.clone(),
                    });
                }
            }
        }
        out
    }

    /// Stops waiting for every pending query: their answers no longer count as pending.
    /// Queries asked for but not yet sent are dropped.
    pub fn abandon_pending(&mut self) {
        self.unsent.clear();
        for s in self.names.iter_mut() {
            for q in &mut s.state {
                if *q == QueryState::Pending {
                    *q = QueryState::Abandoned;
                }
            }
        }
    }

    /// Records something skipped before any attempt, with the reason, for the race's error.
    pub fn note_skipped(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.skip(what, why);
    }

    /// The compatible services, in the order they are tried (RFC 9460 §2.4.1).
    pub fn services(&self) -> impl ExactSizeIterator<Item = &ServiceInfo> {
        self.services.iter().map(|s| &s.info)
    }

    /// DNS failures and empty answers, in arrival order.
    pub fn errors(&self) -> &[(Query, Option<DnsError>)] {
        &self.errors
    }

    /// Addresses and records skipped, with reasons: the first [`MAX_SKIPPED_LISTED`].
    pub fn skipped(&self) -> &[Skipped] {
        self.skipped.as_ref().map_or(&[], |s| &s.listed)
    }

    /// How many more were skipped than [`Self::skipped`] lists.
    pub fn skipped_more(&self) -> usize {
        self.skipped.as_ref().map_or(0, |s| s.more)
    }

    /// A family whose addresses were skipped because the host has no route for it, if any
    /// (IPv6 first when both were).
    pub fn unroutable_family(&self) -> Option<Family> {
        Family::ALL
            .into_iter()
            .find(|f| self.unroutable[family_slot(*f)])
    }
}

fn family_slot(f: Family) -> usize {
    match f {
        Family::V6 => 0,
        Family::V4 => 1,
    }
}

const LINK_LOCAL_WITHOUT_SCOPE: &str = "link-local address without a scope";

/// Why `ip` can never be a destination (RFC 6724 §6 Rule 1 and common sense), if so.
fn invalid_destination(ip: IpAddr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified address");
    }
    if ip.is_multicast() {
        return Some("multicast address");
    }
    match ip {
        IpAddr::V4(v4) if v4.is_broadcast() => Some("broadcast address"),
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some("address in 0.0.0.0/8"),
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some(LINK_LOCAL_WITHOUT_SCOPE),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn plain() -> Resolution {
        Resolution::new(
            &[QueryKind::Aaaa, QueryKind::A],
            Connectivity::DUAL_STACK,
            Family::V6,
            Duration::from_millis(50),
            AnswerLimits::default(),
        )
    }

    fn addrs(v: &[&str]) -> DnsAnswer {
        DnsAnswer::Addresses(v.iter().map(|s| ip(s)).collect())
    }

    #[test]
    fn positive_aaaa_moves_on_at_once() {
        let mut r = plain();
        r.handle_answer(
            &Query::origin(QueryKind::Aaaa),
            &addrs(&["2001:db8::a"]),
            at(20),
        );
        assert!(r.poll(at(20)));
    }

    #[test]
    fn positive_a_first_waits_for_the_resolution_delay() {
        let mut r = plain();
        r.handle_answer(&Query::origin(QueryKind::A), &addrs(&["192.0.2.1"]), at(20));
        assert!(!r.poll(at(20)));
        assert_eq!(r.deadline(), Some(at(70)));
        assert!(!r.poll(at(69)));
        assert!(r.poll(at(70)));
    }

    #[test]
    fn with_ipv4_preferred_a_positive_a_answer_moves_on_at_once() {
        let mut r = Resolution::new(
            &[QueryKind::Aaaa, QueryKind::A],
            Connectivity::DUAL_STACK,
            Family::V4,
            Duration::from_millis(50),
            AnswerLimits::default(),
        );
        r.handle_answer(&Query::origin(QueryKind::A), &addrs(&["192.0.2.1"]), at(20));
        assert!(r.poll(at(20)));
    }

    #[test]
    fn loopback_is_reachable_without_global_connectivity() {
        let none = Connectivity {
            v6: false,
            v4: false,
            nat64: None,
        };
        let r = Resolution::fixed(&[ip("::1"), ip("127.0.0.1")], false, none);
        assert_eq!(r.addresses(), [ip("::1"), ip("127.0.0.1")]);
        assert!(r.skipped().is_empty());
    }

    #[test]
    fn a_literal_of_a_family_without_a_route_is_reported_as_unroutable() {
        let v4_only = Connectivity {
            v6: false,
            v4: true,
            nat64: None,
        };
        let r = Resolution::literal(ip("2001:db8::a"), v4_only);
        assert!(r.addresses().is_empty());
        assert_eq!(r.unroutable_family(), Some(Family::V6));
    }

    #[test]
    fn a_literal_is_taken_as_is_exactly_when_fixed_admits_it_unchanged_and_silently() {
        let literals = [
            "2001:db8::a",
            "192.0.2.1",
            "::1",
            "127.0.0.1",
            "::ffff:192.0.2.1",
            "64:ff9b::c000:201",
            "fe80::1",
            "::",
            "0.0.0.0",
            "ff02::1",
            "224.0.0.1",
            "255.255.255.255",
            "fd00::1",
        ];
        let mut cases = 0;
        for v6 in [false, true] {
            for v4 in [false, true] {
                for nat64 in [None, Some(Nat64Prefix::WELL_KNOWN)] {
                    let conn = Connectivity { v6, v4, nat64 };
                    for l in literals {
                        let r = Resolution::literal(ip(l), conn);
                        let as_is = r.addresses() == [ip(l)]
                            && r.skipped().is_empty()
                            && r.unroutable_family().is_none();
                        assert_eq!(
                            Resolution::takes_literal_as_is(ip(l), conn),
                            as_is,
                            "{l} with {conn:?}"
                        );
                        cases += usize::from(as_is);
                    }
                }
            }
        }
        // Some literals are taken as they are, and some are not.
        assert!(cases > 0 && cases < 4 * 2 * literals.len());
    }

    #[test]
    fn a_scoped_link_local_literal_is_admitted_and_an_unscoped_one_is_not() {
        let c = Connectivity::DUAL_STACK;
        assert_eq!(
            Resolution::fixed(&[ip("fe80::1")], true, c).addresses(),
            [ip("fe80::1")]
        );
        let r = Resolution::fixed(&[ip("fe80::1")], false, c);
        assert!(r.addresses().is_empty());
        assert_eq!(r.skipped()[0].why, "link-local address without a scope");
    }

    #[test]
    fn negative_aaaa_inside_the_delay_ends_it() {
        let mut r = plain();
        r.handle_answer(&Query::origin(QueryKind::A), &addrs(&["192.0.2.1"]), at(20));
        r.handle_answer(&Query::origin(QueryKind::Aaaa), &addrs(&[]), at(35));
        assert!(r.poll(at(35)));
    }

    #[test]
    fn invalid_addresses_are_skipped_with_reasons() {
        let mut r = plain();
        r.handle_answer(
            &Query::origin(QueryKind::Aaaa),
            &addrs(&[
                "::",
                "ff02::1",
                "fe80::1",
                "2001:db8::a",
                "::ffff:192.0.2.9",
            ]),
            at(1),
        );
        r.handle_answer(
            &Query::origin(QueryKind::A),
            &addrs(&["255.255.255.255", "0.1.2.3", "224.0.0.1"]),
            at(1),
        );
        assert_eq!(r.addresses(), [ip("2001:db8::a"), ip("192.0.2.9")]);
        let whys: Vec<&str> = r.skipped().iter().map(|s| s.why.as_str()).collect();
        assert_eq!(
            whys,
            [
                "unspecified address",
                "multicast address",
                "link-local address without a scope",
                "broadcast address",
                "address in 0.0.0.0/8",
                "multicast address"
            ]
        );
    }

    #[test]
    fn oversized_answers_are_capped_and_reported() {
        let mut r = Resolution::new(
            &[QueryKind::A],
            Connectivity::DUAL_STACK,
            Family::V6,
            Duration::from_millis(50),
            AnswerLimits { max_addresses: 4 },
        );
        let many: Vec<IpAddr> = (1..=10u8).map(|i| IpAddr::from([192, 0, 2, i])).collect();
        r.handle_answer(
            &Query::origin(QueryKind::A),
            &DnsAnswer::Addresses(many),
            at(1),
        );
        assert_eq!(r.addresses().len(), 4);
        assert_eq!(r.skipped().len(), 6);
        assert_eq!(r.skipped()[0].why, "answer capped at 4");
    }

    #[test]
    fn dns64_answers_are_desynthesized_and_deduplicated() {
        let conn = Connectivity {
            v6: true,
            v4: false,
            nat64: Some(Nat64Prefix::WELL_KNOWN),
        };
        let mut r = Resolution::new(
            &conn.queries(false),
            conn,
            Family::V6,
            Duration::from_millis(50),
            AnswerLimits::default(),
        );
        r.handle_answer(
            &Query::origin(QueryKind::Aaaa),
            &addrs(&["2001:db8::a", "64:ff9b::c000:201"]),
            at(10),
        );
        r.handle_answer(&Query::origin(QueryKind::A), &addrs(&["192.0.2.1"]), at(12));
        assert_eq!(r.addresses(), [ip("2001:db8::a"), ip("192.0.2.1")]);
        assert_eq!(conn.connect_ip(ip("192.0.2.1")), ip("64:ff9b::c000:201"));
    }

    #[test]
    fn ipv6_only_host_without_nat64_skips_ipv4() {
        let conn = Connectivity {
            v6: true,
            v4: false,
            nat64: None,
        };
        assert_eq!(conn.queries(false).as_slice(), [QueryKind::Aaaa]);
        let r = Resolution::literal(ip("192.0.2.1"), conn);
        assert!(r.addresses().is_empty());
        assert_eq!(r.skipped()[0].why, "the host has no IPv4 connectivity");
    }

    #[test]
    fn alias_mode_is_followed_and_service_records_beside_it_are_ignored() {
        let mut r = Resolution::new(
            &[QueryKind::Https, QueryKind::Aaaa],
            Connectivity::DUAL_STACK,
            Family::V6,
            Duration::from_millis(50),
            AnswerLimits::default(),
        )
        .named("example.com");
        let alias = HttpsRecord {
            priority: 0,
            target: "Svc.Example.".into(),
            ..Default::default()
        };
        let svc = HttpsRecord {
            priority: 1,
            ipv6hint: vec!["2001:db8::9".parse().unwrap()],
            ..Default::default()
        };
        let https = Query::origin(QueryKind::Https);
        r.handle_answer(&https, &DnsAnswer::Https(vec![alias, svc]), at(5));
        assert!(r.addresses().is_empty());
        let asked: Vec<String> = r.take_queries().map(|q| q.to_string()).collect();
        assert_eq!(
            asked,
            ["HTTPS svc.example", "AAAA svc.example", "A svc.example"]
        );
        assert!(!r.poll(at(5)), "the alias target's HTTPS answer is awaited");
        // The target has no HTTPS records: its own addresses come first, the origin's last.
        let target = |kind| Query::target(kind, "svc.example");
        r.handle_answer(&target(QueryKind::Https), &DnsAnswer::Https(vec![]), at(8));
        r.handle_answer(&target(QueryKind::Aaaa), &addrs(&["2001:db8::5"]), at(9));
        r.handle_answer(&https, &DnsAnswer::Https(vec![]), at(9));
        r.handle_answer(
            &Query::origin(QueryKind::Aaaa),
            &addrs(&["2001:db8::1"]),
            at(10),
        );
        let mut groups = Vec::new();
        r.for_each_candidate(|c| groups.push((c.ip.to_string(), c.group)));
        assert_eq!(
            groups,
            [("2001:db8::5".to_owned(), 0), ("2001:db8::1".to_owned(), 1)]
        );
        assert!(r.poll(at(10)));
    }

    #[test]
    fn an_answer_with_many_target_names_asks_about_a_bounded_number() {
        let mut r = Resolution::new(
            &[QueryKind::Https, QueryKind::Aaaa, QueryKind::A],
            Connectivity::DUAL_STACK,
            Family::V6,
            Duration::from_millis(50),
            AnswerLimits::default(),
        );
        let records: Vec<HttpsRecord> = (0..40)
            .map(|i| HttpsRecord {
                priority: 1,
                target: format!("svc{i}.example"),
                alpn: vec![Alpn::H2],
                ..Default::default()
            })
            .collect();
        let https = Query::origin(QueryKind::Https);
        r.handle_answer(&https, &DnsAnswer::Https(records), at(1));
        assert_eq!(r.take_queries().count(), 2 * MAX_TARGET_NAMES);
        assert_eq!(r.services().count(), MAX_TARGET_NAMES);
        let over = r
            .skipped()
            .iter()
            .filter(|s| s.why == format!("more than {MAX_TARGET_NAMES} names to ask about"))
            .count();
        // The first MAX_SKIPPED_LISTED are listed with the reason, the rest counted.
        assert_eq!(over, MAX_SKIPPED_LISTED.min(40 - MAX_TARGET_NAMES));
        assert_eq!(over + r.skipped_more(), 40 - MAX_TARGET_NAMES);
    }

    #[test]
    fn alias_loops_and_overlong_chains_are_cut_with_a_reason() {
        let https = |name: &str| {
            if name == "example.com" {
                Query::origin(QueryKind::Https)
            } else {
                Query::target(QueryKind::Https, name)
            }
        };
        let alias = |to: &str| {
            DnsAnswer::Https(vec![HttpsRecord {
                priority: 0,
                target: to.into(),
                ..Default::default()
            }])
        };
        let fresh = || {
            Resolution::new(
                &[QueryKind::Https, QueryKind::Aaaa],
                Connectivity::DUAL_STACK,
                Family::V6,
                Duration::from_millis(50),
                AnswerLimits::default(),
            )
            .named("example.com")
        };
        // example.com -> a.example -> example.com
        let mut r = fresh();
        r.handle_answer(&https("example.com"), &alias("a.example"), at(1));
        r.handle_answer(&https("a.example"), &alias("example.com."), at(2));
        assert_eq!(
            r.skipped().last().unwrap().why,
            "alias loop (RFC 9460 §3.1)"
        );
        // A chain of aliases, each to a new name, stops after MAX_ALIAS_CHAIN links.
        let mut r = fresh();
        let mut name = "example.com".to_owned();
        for i in 0..=MAX_ALIAS_CHAIN {
            let next = format!("n{i}.example");
            r.handle_answer(&https(&name), &alias(&next), at(1));
            name = next;
        }
        assert_eq!(
            r.skipped().last().unwrap().why,
            format!("alias chain longer than {MAX_ALIAS_CHAIN} links")
        );
        let https_asked = r
            .take_queries()
            .filter(|q| q.kind == QueryKind::Https)
            .count();
        assert_eq!(https_asked, MAX_ALIAS_CHAIN);
        // An alias to "." means the service does not exist: the origin's records are used.
        let mut r = fresh();
        r.handle_answer(&https("example.com"), &alias("."), at(1));
        assert!(r.take_queries().next().is_none());
        assert!(r.skipped()[0].why.contains("unavailable"));
    }
}
