//! What DNS told a race: the aggregation of its answers ([`Resolution`]), or nothing at all
//! for an IP literal that leaves nothing to resolve.

use std::net::IpAddr;

use fastfallback_proto::{DnsAnswer, DnsError, Family, Instant, Query};
use fastfallback_route::{Candidate, Connectivity, Resolution, Skipped};

/// A race's view of DNS.
///
/// An IP literal that [`Resolution::takes_literal_as_is`] is kept as the address alone: a
/// race to it sends no query, waits for nothing and skips nothing, so the aggregation
/// [`Resolution::fixed`] would build for it says nothing the race needs. Keeping the address
/// alone saves building, visiting and freeing that aggregation on every connect to a literal.
/// Every other origin (names, `localhost`, scoped literals and literals `fixed` changes or
/// skips) keeps its aggregation, boxed so that the race's own allocation stays small.
#[derive(Clone, Debug)]
pub(crate) enum Answers {
    /// An IP literal taken as it is.
    Literal(IpAddr),
    /// The aggregation of everything else.
    Resolved(Box<Resolution>),
}

impl Answers {
    /// The view for the unscoped literal `ip`: the literal alone when the aggregation would
    /// take it as it is, else that aggregation.
    pub(crate) fn literal(ip: IpAddr, conn: Connectivity) -> Self {
        if Resolution::takes_literal_as_is(ip, conn) {
            Self::Literal(ip)
        } else {
            Self::Resolved(Box::new(Resolution::literal(ip, conn)))
        }
    }

    fn resolution(&self) -> Option<&Resolution> {
        match self {
            Self::Literal(_) => None,
            Self::Resolved(r) => Some(r),
        }
    }

    /// [`Resolution::handle_answer`]. A literal sent no query, so an answer is for a query
    /// never sent and is ignored, as the aggregation ignores one.
    pub(crate) fn handle_answer(&mut self, query: &Query, answer: &DnsAnswer, now: Instant) {
        if let Self::Resolved(r) = self {
            r.handle_answer(query, answer, now);
        }
    }

    /// [`Resolution::abandon_unsent`].
    pub(crate) fn abandon_unsent(&mut self) {
        if let Self::Resolved(r) = self {
            r.abandon_unsent();
        }
    }

    /// [`Resolution::poll`]: a literal has moved on from the start.
    pub(crate) fn poll(&mut self, now: Instant) -> bool {
        match self {
            Self::Literal(_) => true,
            Self::Resolved(r) => r.poll(now),
        }
    }

    /// [`Resolution::moved_on`].
    pub(crate) fn moved_on(&self) -> bool {
        self.resolution().is_none_or(Resolution::moved_on)
    }

    /// [`Resolution::deadline`].
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.resolution().and_then(Resolution::deadline)
    }

    /// [`Resolution::pending`].
    pub(crate) fn pending(&self) -> bool {
        self.resolution().is_some_and(Resolution::pending)
    }

    /// [`Resolution::pending_queries`].
    pub(crate) fn pending_queries(&self) -> Vec<Query> {
        self.resolution()
            .map(Resolution::pending_queries)
            .unwrap_or_default()
    }

    /// [`Resolution::abandon_pending`].
    pub(crate) fn abandon_pending(&mut self) {
        if let Self::Resolved(r) = self {
            r.abandon_pending();
        }
    }

    /// [`Resolution::holds_tls`].
    pub(crate) fn holds_tls(&self) -> bool {
        self.resolution().is_some_and(Resolution::holds_tls)
    }

    /// [`Resolution::give_up_https`].
    pub(crate) fn give_up_https(&mut self) {
        if let Self::Resolved(r) = self {
            r.give_up_https();
        }
    }

    /// [`Resolution::first_positive_at`].
    pub(crate) fn first_positive_at(&self) -> Option<Instant> {
        self.resolution().and_then(Resolution::first_positive_at)
    }

    /// [`Resolution::unroutable_family`].
    pub(crate) fn unroutable_family(&self) -> Option<Family> {
        self.resolution().and_then(Resolution::unroutable_family)
    }

    /// [`Resolution::errors`].
    pub(crate) fn errors(&self) -> &[(Query, Option<DnsError>)] {
        self.resolution().map_or(&[], Resolution::errors)
    }

    /// [`Resolution::skipped`].
    pub(crate) fn skipped(&self) -> &[Skipped] {
        self.resolution().map_or(&[], Resolution::skipped)
    }

    /// [`Resolution::skipped_more`].
    pub(crate) fn skipped_more(&self) -> usize {
        self.resolution().map_or(0, Resolution::skipped_more)
    }

    /// [`Resolution::note_skipped`]. A literal keeps no notes, so the finder never takes one
    /// as it is when it would skip it (see [`crate::FastFallbackExchangeFinder`]'s
    /// constructor); a note still reaches an aggregation built for it here.
    pub(crate) fn note_skipped(&mut self, conn: Connectivity, what: String, why: String) {
        if let Self::Literal(ip) = *self {
            *self = Self::Resolved(Box::new(Resolution::literal(ip, conn)));
        }
        if let Self::Resolved(r) = self {
            r.note_skipped(what, why);
        }
    }

    /// [`Resolution::for_each_candidate`]: a literal is its one candidate, in the first group,
    /// on the origin's port, as the aggregation would list it.
    pub(crate) fn for_each_candidate<'a>(&'a self, mut f: impl FnMut(Candidate<'a>)) {
        match self {
            Self::Literal(ip) => f(Candidate {
                ip: *ip,
                port: None,
                group: 0,
                ech: None,
                without_svcb: false,
                tcp: true,
                quic: false,
            }),
            Self::Resolved(r) => r.for_each_candidate(f),
        }
    }
}
