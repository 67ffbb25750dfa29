//! DNS: the queries the race sends at its start, the answers it takes in, and the queries it
//! drops when it no longer needs them.

use std::net::{IpAddr, Ipv6Addr};

use fastfallback_proto::{DnsAnswer, Family, Instant, Output, Query, QueryKind, RaceErrorKind};
use fastfallback_route::order::FamilyPreference;
use fastfallback_route::{Address, Connectivity, Host, Resolution, Scheme, SourceOf, Zone};

use super::{FastFallbackExchangeFinder, RacePhase};
use crate::FallbackPolicy;
use crate::answers::Answers;

impl FastFallbackExchangeFinder {
    // ---- construction ----

    /// What the race knows of DNS at its start, and the queries it sends then (at most HTTPS,
    /// AAAA and A, in order): none for an IP literal or a localhost name.
    #[inline(always)]
    pub(super) fn first_answers(
        address: &Address,
        policy: &FallbackPolicy,
        connectivity: Connectivity,
        seed: u64,
        alternatives: Vec<u16>,
    ) -> (Answers, [Option<QueryKind>; 3]) {
        let (host, _) = address.connect_host();
        match host {
            Host::Ip(ip) => match address.zone() {
                None => (Answers::literal(*ip, connectivity), [None; 3]),
                Some(zone) => {
                    let scoped = matches!(zone, Zone::Index(_));
                    // Boxed where it is built: a resolution is too large to move cheaply.
                    let mut r = Box::new(Resolution::fixed(&[*ip], scoped, connectivity));
                    if let Zone::Name(n) = zone {
                        r.note_skipped(
                            ip.to_string(),
                            format!("zone {n:?} was not turned into an interface index"),
                        );
                    }
                    (Answers::Resolved(r), [None; 3])
                }
            },
            Host::Name(_) if host.is_localhost() => {
                // RFC 6761 §6.3: localhost names are the loopback addresses, never DNS.
                let loopback = [
                    IpAddr::V6(Ipv6Addr::LOCALHOST),
                    IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                ];
                let r = Box::new(Resolution::fixed(&loopback, false, connectivity));
                (Answers::Resolved(r), [None; 3])
            }
            Host::Name(_) => {
                let https = policy.query_https
                    && address.scheme() != Scheme::Tcp
                    && address.proxy().is_none();
                let q = connectivity.queries(https);
                let preferred = match policy.family {
                    FamilyPreference::V6First | FamilyPreference::V6Only => Family::V6,
                    FamilyPreference::V4First | FamilyPreference::V4Only => Family::V4,
                    FamilyPreference::Auto => connectivity.preferred_family(),
                };
                let mut r = Resolution::new(
                    &q,
                    connectivity,
                    preferred,
                    policy.resolution_delay,
                    policy.answer_limits,
                )
                .offering(policy.alpn)
                .seeded(seed)
                .ech_capable(policy.ech && address.is_tls())
                .speaking_quic(policy.quic && address.is_tls())
                .with_alternatives(alternatives);
                if let (true, Host::Name(name)) = (https, host) {
                    r = r.named(name);
                }
                let r = Box::new(r);
                let mut queries = [None; 3];
                for (slot, kind) in queries.iter_mut().zip(q) {
                    *slot = Some(kind);
                }
                (Answers::Resolved(r), queries)
            }
        }
    }

    // ---- inputs ----

    /// Takes in one DNS answer to `query` (a [`QueryKind`] alone means the origin's name),
    /// with the source address of each of its destinations ([`Connectivity::destinations`]),
    /// found by the driver (taken by value: the race's first list of sources is the driver's,
    /// not a copy). A destination without an entry is sorted as if the host had a matching
    /// source for it. An answer may call for follow-up queries (an alias target, a
    /// service's TargetName, RFC 9460 §3), which come out as [`Output::StartQuery`]. Answers
    /// after a win are taken for the DNS tail and start nothing (HEv3 §6).
    pub fn handle_dns(
        &mut self,
        query: impl Into<Query>,
        answer: &DnsAnswer,
        sources: Vec<SourceOf>,
        now: Instant,
    ) {
        let query = query.into();
        let now = self.clock(now);
        self.needs_decision = true;
        match self.phase {
            RacePhase::Waiting
            | RacePhase::Resolving
            | RacePhase::Racing
            | RacePhase::TlsOwner(_) => {
                if self.sources.is_empty() {
                    self.sources = sources;
                } else {
                    for s in sources {
                        match self.sources.iter_mut().find(|k| k.dst == s.dst) {
                            Some(known) => *known = s,
                            None => self.sources.push(s),
                        }
                    }
                }
                self.resolution.handle_answer(&query, answer, now);
                if self.policy.protected_dns
                    && query.kind == QueryKind::Https
                    && matches!(answer, DnsAnswer::Error(_))
                {
                    // HEv3 §6.3 R-38: over protected DNS an SVCB failure may be an attack;
                    // abandon rather than connect without the records.
                    self.fail(RaceErrorKind::SvcbResolutionFailed, now);
                    self.rearm();
                    return;
                }
                if let Answers::Resolved(r) = &mut self.resolution {
                    for q in r.take_queries() {
                        self.out.push_back(Output::StartQuery(q));
                    }
                }
                self.sync_endpoints();
                self.try_move_on(now);
                self.resume_held(now);
            }
            // The DNS tail: the answer is taken (the query is no longer pending) and starts
            // nothing, follow-up queries included. Caching it is the resolver's job.
            RacePhase::Won { .. } => {
                self.resolution.handle_answer(&query, answer, now);
                self.resolution.abandon_unsent();
            }
            RacePhase::Failed | RacePhase::Abandoned => {}
        }
        self.rearm();
    }

    // ---- getters ----

    /// How many queries the race sends at its start (follow-ups not counted), so that a
    /// driver can size its bookkeeping once.
    pub fn initial_queries(&self) -> usize {
        self.queries.iter().flatten().count()
    }

    /// The queries not yet answered.
    pub fn pending_queries(&self) -> Vec<Query> {
        self.resolution.pending_queries()
    }

    // ---- internals ----

    /// The next of the queries sent at the start that has not gone out yet. They fill
    /// `queries` from its start, so the first empty slot ends them.
    pub(super) fn next_initial_query(&mut self) -> Option<QueryKind> {
        if !self.queries_sent {
            return None;
        }
        let q = (*self.queries.get(usize::from(self.queries_out))?)?;
        self.queries_out += 1;
        Some(q)
    }

    pub(super) fn try_move_on(&mut self, now: Instant) {
        // Only a resolving race asks: `poll` records that DNS moved on.
        if matches!(self.phase, RacePhase::Resolving) && self.resolution.poll(now) {
            self.phase.move_on().ok();
        }
    }

    pub(super) fn cancel_queries(&mut self) {
        // A race that ended while waiting never sent its queries: nothing to cancel.
        if self.queries_sent {
            for query in self.resolution.pending_queries() {
                self.out.push_back(Output::CancelQuery(query));
            }
        } else {
            // Never sent: none of them goes out.
            self.queries_out = u8::MAX;
        }
        self.queries_sent = true;
        self.resolution.abandon_pending();
    }
}
