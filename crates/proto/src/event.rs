//! The event protocol between a race and its driver.

use std::fmt;

use crate::{Alpn, AttemptError, AttemptId, PooledId, Query, RaceError};

/// Progress of one attempt, reported by the driver.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum AttemptEvent<P> {
    /// The TCP handshake finished. For a plan with TLS, the race extends its next-attempt timer
    /// (HEv3 §6.1) or, when it wins at TCP, cancels the others. A QUIC plan has no such
    /// step, and the race ignores this event for one.
    TcpConnected,
    /// The proxy tunnel of a plan through a proxy is open (HTTP `CONNECT` answered 2xx, or
    /// SOCKS5 succeeded): TLS to the origin, if the plan has it, starts now. Until this event
    /// the attempt is in [`Phase::Tunnel`](crate::Phase::Tunnel), so a proxy that accepts TCP
    /// and never answers is reported as stuck in the tunnel, not in TCP or TLS.
    TunnelOpen,
    /// The plan finished: TCP connected and, if the plan has TLS, the handshake and certificate
    /// check are done; for a QUIC plan, its handshake (TLS 1.3 included, RFC 9001) is done
    /// (HEv3 §6.1). Carries the ALPN protocol the server chose, if any.
    Connected(Option<Alpn>),
    /// The plan failed. `follow_up` is a replacement plan to try first, for example the next
    /// TLS configuration or a proxy's authentication retry (OkHttp's follow-up plans).
    Failed {
        /// Why it failed.
        error: AttemptError,
        /// A plan to run next, ahead of everything else.
        follow_up: Option<P>,
    },
    /// The plan did not fail, but asks for a replacement plan to run at once (for example a
    /// proxy asked for credentials and closed the connection). Not counted as an error.
    FollowUp(P),
}

/// Why the race cancelled an attempt.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum CancelReason {
    /// Another attempt won, or a pooled connection won and this attempt was not the one
    /// kept as [`Self::Overtaken`].
    LostRace,
    /// A pooled connection won the race while this attempt was still connecting, and it is
    /// the attempt furthest along. It lost to no other route, so RFC 8305 §5's rule (cancel
    /// the losers once one connection is up) does not reach it: its connect is demand the
    /// pool could not meet when the race began, and a driver that pools lets it finish and
    /// keeps it idle, as Chromium's connect jobs (which outlive the request that started
    /// them) and hyper-util's background connects do. Any other driver closes it.
    Overtaken,
    /// The attempt ran past its own time limit.
    AttemptTimeout,
    /// The overall connect deadline passed.
    Deadline,
    /// The concurrent-attempt cap was full and a newer attempt needed the slot.
    Evicted,
    /// The caller abandoned the race.
    Abandoned,
    /// Its endpoint left the DNS answers while it waited to start TLS, so it matches no
    /// record (RFC 9460 §5.1: a pre-connection is used only if it is consistent with one), or
    /// the HTTPS answer it waited for failed over protected DNS (HEv3 §6.3 R-38).
    Withdrawn,
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::LostRace => "lost the race",
            Self::Overtaken => "overtaken by a pooled connection",
            Self::AttemptTimeout => "attempt timed out",
            Self::Deadline => "connect deadline passed",
            Self::Evicted => "evicted to make room for a newer attempt",
            Self::Abandoned => "caller abandoned the race",
            Self::Withdrawn => {
                "withdrawn before TLS: the DNS answers no longer list it, or its HTTPS query failed"
            }
        })
    }
}

/// What won a race.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum Winner {
    /// One of the race's own attempts.
    Attempt(AttemptId),
    /// A pooled connection that became usable mid-race.
    Pooled(PooledId),
}

/// What the race asks of its driver. Drain with `poll_output` until it returns `None`.
///
/// An output names an attempt by its id and carries no copy of its plan: the race's record
/// of the attempt holds the plan (`FastFallbackExchangeFinder::attempt` in
/// `fastfallback-plan`), and a driver reads it there. An output is therefore a few words,
/// cheap to queue and to hand over.
#[derive(Clone, Debug, Eq, PartialEq)]
#[must_use]
pub enum Output {
    /// Send this DNS query now.
    StartQuery(Query),
    /// Stop waiting for this query: its answer can no longer matter.
    CancelQuery(Query),
    /// Start attempt `id` now, on the plan the race's record of it holds.
    StartAttempt {
        /// The attempt's id.
        id: AttemptId,
    },
    /// Go on with an attempt whose plan held its TLS step after TCP (until the HTTPS answer
    /// was in): run the rest of its plan, which the race has just decided again (its TLS
    /// step may now carry the ECH configuration that answer brought).
    ResumeAttempt {
        /// The attempt.
        id: AttemptId,
    },
    /// The attempt's TLS step may start now: its TCP handshake (and its proxy tunnel, if its
    /// plan has one) is done, and its plan does not hold TLS. A driver that runs each step only
    /// when told starts the ClientHello here; one that goes on to TLS by itself, as soon as
    /// TCP is done, may ignore it. A plan that holds TLS goes on with
    /// [`Output::ResumeAttempt`] instead, and a plan without TLS never gets either.
    StartTls(AttemptId),
    /// Stop this attempt now and close everything it opened.
    CancelAttempt {
        /// The attempt.
        id: AttemptId,
        /// Why.
        reason: CancelReason,
    },
    /// The race is won. Every loser was cancelled by `CancelAttempt` outputs just before this.
    Done(Winner),
    /// The race is lost; every cause is inside. Boxed: a race fails once, and every other
    /// output stays small.
    Failed(Box<RaceError>),
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;

    /// Outputs are queued inside the race and handed over one by one, several per connect:
    /// each names what it is about and carries no plan or error inline, so it moves in a few
    /// registers. A variant that grew past a query (16 bytes) would show here.
    #[test]
    fn an_output_is_no_larger_than_a_query_and_its_tag() {
        assert_eq!(size_of::<Query>(), 16);
        assert!(size_of::<Output>() <= 24, "{}", size_of::<Output>());
    }
}
