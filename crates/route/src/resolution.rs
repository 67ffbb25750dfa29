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
    Alpn, AlpnOffer, DnsAnswer, DnsError, Family, HttpsRecord, Instant, QueryKind,
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

    /// The family HEv3 §4.2 prefers: IPv6 when it has connectivity, else IPv4.
    pub fn preferred_family(&self) -> Family {
        if self.v6 { Family::V6 } else { Family::V4 }
    }

    /// The queries to send, in HEv3 §4.1 order: HTTPS (if `https`), AAAA when IPv6 works, A when
    /// IPv4 works or a NAT64 prefix is known (HEv3 §8.1: "MUST").
    pub fn queries(&self, https: bool) -> Vec<QueryKind> {
        let mut q = Vec::with_capacity(3);
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
        let logical = |ip: IpAddr| match (normalize_ip(ip), self.nat64) {
            (IpAddr::V6(v6), Some(p)) => p.extract(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
            (ip, _) => ip,
        };
        match answer {
            DnsAnswer::Addresses(list) => list.iter().map(|ip| logical(*ip)).collect(),
            DnsAnswer::Https(records) => records
                .iter()
                .flat_map(|r| {
                    let v6 = r.ipv6hint.iter().map(|v| IpAddr::V6(*v));
                    v6.chain(r.ipv4hint.iter().map(|v| IpAddr::V4(*v)))
                })
                .map(logical)
                .collect(),
            DnsAnswer::Error(_) => Vec::new(),
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

/// An address (or record) skipped before any attempt, and why. Reported in the race's error.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Skipped {
    /// What was skipped.
    pub what: String,
    /// Why.
    pub why: String,
}

/// What a compatible HTTPS record tells a TCP client (RFC 9460 §7).
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct ServiceInfo {
    /// The `port` SvcParam of the best compatible record (RFC 9460 §7.2).
    pub port: Option<u16>,
    /// Its ALPN set, defaults included (RFC 9460 §7.1.2).
    pub alpn: Vec<Alpn>,
}

#[derive(Clone, Debug, Eq, PartialEq)]
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

/// Aggregates the answers of one race's queries. No I/O; every input carries `now`.
#[derive(Clone, Debug)]
pub struct Resolution {
    state: [QueryState; 3],
    conn: Connectivity,
    preferred: Family,
    /// Families whose addresses were skipped because the host has no route for them.
    unroutable: [bool; 2],
    limits: AnswerLimits,
    resolution_delay: Duration,
    aaaa: Option<Addrs>,
    a: Option<Addrs>,
    hints: Vec<IpAddr>,
    service: Option<ServiceInfo>,
    first_positive_at: Option<Instant>,
    moved_on: bool,
    errors: Vec<(QueryKind, Option<DnsError>)>,
    skipped: Vec<Skipped>,
    /// What the client offers in ALPN: HTTPS records with none of it are skipped.
    offer: AlpnOffer,
    /// Seeds the shuffle of equal-priority HTTPS records.
    seed: u64,
}

fn idx(k: QueryKind) -> usize {
    match k {
        QueryKind::Https => 0,
        QueryKind::Aaaa => 1,
        QueryKind::A => 2,
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
        let mut state = [
            QueryState::NotSent,
            QueryState::NotSent,
            QueryState::NotSent,
        ];
        for &q in queries {
            state[idx(q)] = QueryState::Pending;
        }
        Self {
            state,
            conn,
            preferred,
            unroutable: [false; 2],
            limits,
            resolution_delay,
            aaaa: None,
            a: None,
            hints: Vec::new(),
            service: None,
            first_positive_at: None,
            moved_on: false,
            errors: Vec::new(),
            skipped: Vec::new(),
            offer: AlpnOffer::Both,
            seed: 0,
        }
    }

    /// Seeds the shuffle of HTTPS records of equal priority (RFC 9460 §2.4.1); the same seed
    /// gives the same order.
    #[must_use]
    pub fn seeded(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The same aggregation for a client that offers `offer` in ALPN (default: both `h2` and
    /// `http/1.1`): HTTPS records advertising none of it are skipped (RFC 9460 §7.1.2).
    #[must_use]
    pub fn offering(mut self, offer: AlpnOffer) -> Self {
        self.offer = offer;
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
        r.aaaa = Some(v6);
        r.a = Some(v4);
        r.moved_on = true;
        r
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
    pub fn handle_answer(&mut self, kind: QueryKind, answer: &DnsAnswer, now: Instant) {
        let positive = match answer {
            DnsAnswer::Error(e) => {
                self.errors.push((kind, Some(e.clone())));
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
                    self.errors.push((kind, None));
                }
                let positive = !list.is_empty();
                if kind == QueryKind::Aaaa {
                    self.aaaa = Some(list);
                } else {
                    self.a = Some(list);
                }
                positive
            }
            DnsAnswer::Https(records) => self.take_https(records),
        };
        self.state[idx(kind)] = QueryState::Answered { positive };
        if positive && self.first_positive_at.is_none() {
            self.first_positive_at = Some(now);
        }
    }

    fn skip(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.skipped.push(Skipped {
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

    fn take_https(&mut self, records: &[HttpsRecord]) -> bool {
        self.hints.clear();
        self.service = None;
        if records.iter().any(HttpsRecord::is_alias) {
            // RFC 9460 §2.4.1: with any AliasMode record, ServiceMode records are ignored.
            self.skip(
                "HTTPS AliasMode record",
                "alias chains are not followed yet",
            );
            return false;
        }
        let mut compatible: Vec<(&HttpsRecord, Vec<Alpn>)> = Vec::with_capacity(records.len());
        for r in records {
            let mut alpn = r.alpn.clone();
            if !r.no_default_alpn && !alpn.contains(&Alpn::Http11) {
                alpn.push(Alpn::Http11);
            }
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
            } else if !alpn.iter().any(|a| self.offer.speaks(a)) {
                // RFC 9460 §7.1.2, HEv3 §6.2: no protocol we speak.
                self.skip(format!("HTTPS record {}", r.priority), "no supported ALPN");
            } else {
                compatible.push((r, alpn));
            }
        }
        compatible.sort_by_key(|(r, _)| r.priority);
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
                    .take_while(|(r, _)| r.priority == p)
                    .count();
            for i in (start + 1..end).rev() {
                state = crate::splitmix64(state);
                let j = start + (state % (i - start + 1) as u64) as usize;
                compatible.swap(i, j);
            }
            start = end;
        }
        let mut hints = Vec::new();
        for (r, _) in &compatible {
            hints.extend(r.ipv6hint.iter().map(|&v| IpAddr::V6(v)));
            hints.extend(r.ipv4hint.iter().map(|&v| IpAddr::V4(v)));
        }
        let mut admitted = SmallVec::<[IpAddr; 0]>::with_capacity(hints.len());
        self.admit(hints, &mut admitted);
        self.hints = admitted.into_vec();
        self.service = compatible
            .into_iter()
            .next()
            .map(|(r, alpn)| ServiceInfo { port: r.port, alpn });
        !self.hints.is_empty()
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
        let pref_answered = !matches!(self.state[idx(pref_kind)], QueryState::Pending)
            || self.hints.iter().any(|ip| Family::of(*ip) == pref);
        let https_done = !matches!(self.state[0], QueryState::Pending);
        let set1 = pref_answered && https_done;
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

    /// The current address set, in DNS order: per family, the real answer if one arrived,
    /// else the HTTPS hints (HEv3 §7: real records replace hints). IPv6 first, then IPv4.
    pub fn addresses(&self) -> Vec<IpAddr> {
        let mut out = Vec::new();
        self.for_each_address(|ip| {
            if !out.contains(&ip) {
                out.push(ip);
            }
        });
        out
    }

    /// Calls `f` with every address of [`Self::addresses`], in the same order, without
    /// collecting them; an address may come twice (the caller de-duplicates).
    pub fn for_each_address(&self, mut f: impl FnMut(IpAddr)) {
        // HEv3 §7: a real answer replaces its family's hints, an empty one too, unless that
        // would leave no address at all: then the hints stay (a race never fails with "no
        // addresses" while a usable hint remains).
        let hints_at_stake = !self.hints.is_empty()
            && (matches!(self.aaaa.as_deref(), Some([])) || matches!(self.a.as_deref(), Some([])));
        let mut any = !hints_at_stake;
        if hints_at_stake {
            self.visit_addresses(false, |_| any = true);
        }
        self.visit_addresses(!any, &mut f);
    }

    fn visit_addresses(&self, keep_hints: bool, mut f: impl FnMut(IpAddr)) {
        for fam in Family::ALL {
            let real = if fam == Family::V6 {
                &self.aaaa
            } else {
                &self.a
            };
            let source: &[IpAddr] = match real.as_deref() {
                Some([]) if keep_hints => &self.hints,
                Some(list) => list,
                None => &self.hints,
            };
            source
                .iter()
                .copied()
                .filter(|ip| Family::of(*ip) == fam)
                .for_each(&mut f);
            // De-synthesized DNS64 answers (HEv3 §8.2) land in the AAAA list as IPv4.
            if fam == Family::V4
                && let Some(list) = &self.aaaa
            {
                list.iter()
                    .copied()
                    .filter(|ip| ip.is_ipv4())
                    .for_each(&mut f);
            }
        }
    }

    /// Whether `ip` is among [`Self::addresses`].
    pub fn has_address(&self, ip: IpAddr) -> bool {
        let mut found = false;
        self.for_each_address(|a| found |= a == ip);
        found
    }

    /// When the first positive answer (or usable hint) arrived, if one has.
    pub fn first_positive_at(&self) -> Option<Instant> {
        self.first_positive_at
    }

    /// Whether any query is still unanswered.
    pub fn pending(&self) -> bool {
        self.state.contains(&QueryState::Pending)
    }

    /// The queries still unanswered.
    pub fn pending_kinds(&self) -> Vec<QueryKind> {
        QueryKind::ALL
            .into_iter()
            .filter(|k| self.state[idx(*k)] == QueryState::Pending)
            .collect()
    }

    /// Stops waiting for every pending query: their answers no longer count as pending.
    pub fn abandon_pending(&mut self) {
        for s in &mut self.state {
            if *s == QueryState::Pending {
                *s = QueryState::Abandoned;
            }
        }
    }

    /// Records something skipped before any attempt, with the reason, for the race's error.
    pub fn note_skipped(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.skip(what, why);
    }

    /// The HTTPS service information, if a compatible record arrived.
    pub fn service(&self) -> Option<&ServiceInfo> {
        self.service.as_ref()
    }

    /// DNS failures and empty answers, in arrival order.
    pub fn errors(&self) -> &[(QueryKind, Option<DnsError>)] {
        &self.errors
    }

    /// Addresses and records skipped, with reasons.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
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
        r.handle_answer(QueryKind::Aaaa, &addrs(&["2001:db8::a"]), at(20));
        assert!(r.poll(at(20)));
    }

    #[test]
    fn positive_a_first_waits_for_the_resolution_delay() {
        let mut r = plain();
        r.handle_answer(QueryKind::A, &addrs(&["192.0.2.1"]), at(20));
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
        r.handle_answer(QueryKind::A, &addrs(&["192.0.2.1"]), at(20));
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
        r.handle_answer(QueryKind::A, &addrs(&["192.0.2.1"]), at(20));
        r.handle_answer(QueryKind::Aaaa, &addrs(&[]), at(35));
        assert!(r.poll(at(35)));
    }

    #[test]
    fn invalid_addresses_are_skipped_with_reasons() {
        let mut r = plain();
        r.handle_answer(
            QueryKind::Aaaa,
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
            QueryKind::A,
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
        r.handle_answer(QueryKind::A, &DnsAnswer::Addresses(many), at(1));
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
            QueryKind::Aaaa,
            &addrs(&["2001:db8::a", "64:ff9b::c000:201"]),
            at(10),
        );
        r.handle_answer(QueryKind::A, &addrs(&["192.0.2.1"]), at(12));
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
        assert_eq!(conn.queries(false), [QueryKind::Aaaa]);
        let r = Resolution::literal(ip("192.0.2.1"), conn);
        assert!(r.addresses().is_empty());
        assert_eq!(r.skipped()[0].why, "the host has no IPv4 connectivity");
    }

    #[test]
    fn alias_mode_makes_service_records_ignored() {
        let mut r = Resolution::new(
            &[QueryKind::Https, QueryKind::Aaaa],
            Connectivity::DUAL_STACK,
            Family::V6,
            Duration::from_millis(50),
            AnswerLimits::default(),
        );
        let alias = HttpsRecord {
            priority: 0,
            target: "svc.example".into(),
            ..Default::default()
        };
        let svc = HttpsRecord {
            priority: 1,
            ipv6hint: vec!["2001:db8::9".parse().unwrap()],
            ..Default::default()
        };
        r.handle_answer(QueryKind::Https, &DnsAnswer::Https(vec![alias, svc]), at(5));
        assert!(r.addresses().is_empty());
        assert!(r.service().is_none());
    }
}
