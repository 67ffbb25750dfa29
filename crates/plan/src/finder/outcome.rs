//! How the race ends when it ends by itself: a win, or a failure that reports every cause.

use fastfallback_proto::{
    AttemptFailure, CancelReason, Instant, Output, RaceError, RaceErrorKind, Winner,
};

use fastfallback_route::LessonKind;

use super::FastFallbackExchangeFinder;
use crate::attempt::AttemptState;
use crate::timer::Timer;

impl FastFallbackExchangeFinder {
    /// Ends the race with `winner` (attempt `index`, if it is one): HEv3 §6, success cancels
    /// every other attempt, and the DNS tail begins. When a pooled connection wins, the
    /// attempt furthest along is cancelled as [`CancelReason::Overtaken`] rather than lost.
    pub(super) fn win(&mut self, winner: Winner, index: Option<usize>, now: Instant) {
        if self.phase.win(winner, now).is_err() {
            return;
        }
        let overtaken = match winner {
            Winner::Pooled(_) => self.furthest_along(),
            Winner::Attempt(_) => None,
        };
        // The winner ends first: then a race whose only attempt won has nothing left in
        // flight, and cancelling the rest looks at nothing.
        if let Some(i) = index {
            self.end(i, AttemptState::Won, now);
        }
        let keep = overtaken.map(|i| self.attempts[i].id);
        self.cancel_in_flight(CancelReason::LostRace, keep, now);
        if let Some(i) = overtaken {
            self.cancel(i, CancelReason::Overtaken, now);
        }
        if let Some(i) = index {
            self.judge_quic(i, now);
        }
        // The DNS tail is decided here, and only here (HEv3 §6): pending queries may still
        // fill the cache until `now + dns_tail`. A race that won while waiting sent none.
        if !self.queries_sent {
            self.cancel_queries();
        }
        let tail = self
            .resolution
            .pending()
            .then(|| now + self.policy.dns_tail);
        self.timers.set(Timer::DnsTail, tail);
        self.out.push_back(Output::Done(winner));
    }

    /// What the win of attempt `winner` says about QUIC to the origin, for route memory's
    /// broken-QUIC record (Chromium's broken alternative services). A QUIC winner says QUIC
    /// works ([`LessonKind::QuicWorked`]). A TCP winner says QUIC is broken
    /// ([`LessonKind::QuicBroken`]) when a QUIC attempt of this exchange started no later
    /// than the winner and did not win: it failed, or was still in its handshake when a
    /// connection that started after it was done. QUIC attempts that started after the
    /// winner had no fair chance, so they say nothing.
    fn judge_quic(&mut self, winner: usize, now: Instant) {
        // Nothing to learn without memory (a loopback literal's race): no scan either.
        if !self.memory.is_enabled() {
            return;
        }
        let w = &self.attempts[winner];
        let lesson = if !w.over_tcp() {
            Some((w.target(), LessonKind::QuicWorked))
        } else {
            self.attempts
                .iter()
                .find(|a| !a.over_tcp() && a.exchange == w.exchange && a.started <= w.started)
                .map(|a| (a.target(), LessonKind::QuicBroken))
        };
        if let Some((target, kind)) = lesson {
            self.learn(target, now, kind);
        }
    }

    /// The attempt in flight nearest to a connection: the first whose TCP handshake finished,
    /// else the one started last (the race started it because those before it were slow).
    fn furthest_along(&self) -> Option<usize> {
        let in_flight = || {
            self.attempts
                .iter()
                .enumerate()
                .filter(|(_, a)| a.in_flight())
        };
        in_flight()
            .filter_map(|(i, a)| a.tcp_connected.map(|t| (t, i)))
            .min()
            .map(|(_, i)| i)
            .or_else(|| in_flight().next_back().map(|(i, _)| i))
    }

    /// Ends the race in failure, cancelling what is still in flight; [`Output::Failed`]
    /// carries every cause.
    pub(super) fn fail(&mut self, kind: RaceErrorKind, now: Instant) {
        if self.phase.fail().is_err() {
            return;
        }
        match kind {
            RaceErrorKind::TimedOut => self.cancel_in_flight(CancelReason::Deadline, None, now),
            // Held attempts: their TLS never starts.
            RaceErrorKind::SvcbResolutionFailed => {
                self.cancel_in_flight(CancelReason::Withdrawn, None, now);
            }
            _ => {}
        }
        let attempts = self
            .attempts
            .iter()
            .filter(|a| a.exchange == self.exchange)
            .filter_map(|a| {
                a.error().map(|error| AttemptFailure {
                    id: a.id,
                    addr: a.plan.route.target,
                    started: a.started,
                    elapsed: a.ended.unwrap_or(now) - a.started,
                    error: error.clone(),
                })
            })
            .collect();
        self.cancel_queries();
        self.timers.stop_all();
        self.out.push_back(Output::Failed(Box::new(RaceError {
            kind,
            attempts,
            dns: self.resolution.errors().to_vec(),
            skipped: self
                .resolution
                .skipped()
                .iter()
                .map(|s| (s.what.clone(), s.why.clone()))
                .collect(),
            skipped_more: u32::try_from(self.resolution.skipped_more()).unwrap_or(u32::MAX),
        })));
    }
}
