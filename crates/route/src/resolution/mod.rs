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
use std::time::Duration;

use fastfallback_proto::{
    AlpnOffer, DnsAnswer, DnsError, Family, Instant, Query, QueryKind, QueryName,
};
use smallvec::SmallVec;

use crate::address::normalize_ip;

mod candidates;
mod connectivity;
mod https;
mod names;
#[cfg(test)]
mod tests;

pub use candidates::Candidate;
pub use connectivity::Connectivity;
pub use https::ServiceInfo;

use https::Service;
use names::{Addrs, NameState, Names, QueryState, idx};

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

/// The longest AliasMode chain followed (RFC 9460 §3.1 asks for a limit; 8 is what Chromium and
/// the DNS resolvers that follow aliases use).
pub const MAX_ALIAS_CHAIN: usize = 8;

/// The most names besides the origin one race asks about (alias targets and service
/// TargetNames together): an HTTPS answer can list any number of TargetNames, and each costs
/// two queries. Records beyond it are skipped with a reason.
pub const MAX_TARGET_NAMES: usize = 16;

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
        // Condition set 1 of HEv3 §4.2: the origin's preferred-family query has
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
