//! The race's timers: firing the ones that expired, re-deriving them from the race's state
//! after every input, and reading them one [`Timer`] kind at a time.
//!
//! [`FastFallbackExchangeFinder::poll_timeout`] is the earliest *armed* timer: the only
//! instant a driver must wake up for. A sans-IO user who drives the race itself (a test, a
//! runtime of its own) often needs to know which deadline that is, and when a deadline that
//! is not armed still bounds the race; [`FastFallbackExchangeFinder::timer`] says.

use fastfallback_proto::{CancelReason, Instant, RaceErrorKind};

use super::{FastFallbackExchangeFinder, RacePhase};
use crate::timer::Timer;

impl FastFallbackExchangeFinder {
    /// The deadline of timer kind `timer`, if it bounds the race as it stands (after the
    /// inputs and polls so far).
    ///
    /// Every kind but [`Timer::NextAttempt`] reads as armed: [`Self::poll_timeout`] is the
    /// earliest of them. [`Timer::NextAttempt`] also reads, while it is not armed, as the
    /// deadline the race keeps after the list of endpoints has run out (HEv3 §6 R-29,
    /// reference profile P7): as long as the most recently started attempt is in flight, an
    /// endpoint or a follow-up plan that arrives before that deadline starts at it, not at
    /// once. A kept deadline wakes nothing up, so [`Self::poll_timeout`] leaves it out; once
    /// it has passed, the latest attempt has ended, or the race no longer races, it bounds
    /// nothing and reads `None`.
    ///
    /// ```
    /// use fastfallback_plan::{FastFallbackExchangeFinder, FallbackPolicy, RaceInput, Timer};
    /// use fastfallback_proto::{DnsAnswer, Instant, QueryKind};
    /// use fastfallback_route::{Address, Connectivity};
    ///
    /// let addr = Address::parse("tcp://example.com:80").unwrap();
    /// let input = RaceInput::new(Connectivity::DUAL_STACK);
    /// let t0 = Instant::ZERO;
    /// let mut race = FastFallbackExchangeFinder::new(addr, FallbackPolicy::default(), input, t0);
    /// while race.poll_output(t0).is_some() {}
    /// let t10 = Instant::from_millis(10);
    /// let a = DnsAnswer::Addresses(vec!["192.0.2.1".parse().unwrap()]);
    /// race.handle_dns(QueryKind::A, &a, Vec::new(), t10);
    /// // A positive A answer with AAAA pending: the Resolution Delay (RFC 8305 §3) runs.
    /// assert_eq!(race.timer(Timer::ResolutionDelay), Some(Instant::from_millis(60)));
    /// assert_eq!(race.timer(Timer::Deadline), Some(Instant::from_millis(10_000)));
    /// assert_eq!(race.poll_timeout(), Some(Instant::from_millis(60)));
    /// ```
    pub fn timer(&self, timer: Timer) -> Option<Instant> {
        let armed = self.timers.get(timer);
        match timer {
            Timer::NextAttempt => armed.or_else(|| self.kept_next_attempt()),
            _ => armed,
        }
    }

    /// The next-attempt deadline kept after the list ran out (profile P7), while a plan that
    /// arrived now would still wait for it: see [`Self::timer`].
    fn kept_next_attempt(&self) -> Option<Instant> {
        let at = self.pacing.next_at?;
        let latest_in_flight = self
            .pacing
            .latest
            .and_then(|id| self.attempt(id))
            .is_some_and(|a| a.in_flight());
        let bounds =
            matches!(self.phase, RacePhase::Racing) && latest_in_flight && self.last_now < at;
        bounds.then_some(at)
    }
}

impl FastFallbackExchangeFinder {
    // ---- inputs ----

    /// Fires every timer that has expired at `now` (see [`Timer`]). Call it when
    /// [`Self::poll_timeout`] has passed; calling it early does nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock(now);
        for timer in self.timers.expire(now) {
            self.needs_decision = true;
            match timer {
                Timer::Deadline => {
                    if self.phase.is_running() {
                        self.fail(RaceErrorKind::TimedOut, now);
                    }
                }
                Timer::AttemptTimeout => {
                    for i in 0..self.attempts.len() {
                        let a = &self.attempts[i];
                        if a.in_flight() && a.timeout_at <= now {
                            self.cancel(i, CancelReason::AttemptTimeout, now);
                        }
                    }
                }
                Timer::ResolutionDelay => self.try_move_on(now),
                // Firing opens the start gate; the next poll starts the attempt.
                Timer::NextAttempt => {}
                Timer::DnsTail => self.cancel_queries(),
                Timer::HttpsWait => {
                    self.resolution.give_up_https();
                    self.resume_held(now);
                }
            }
        }
        self.rearm();
    }

    // ---- getters ----

    /// When the next attempt may start, if one is waiting for the timer (the armed
    /// [`Timer::NextAttempt`]; [`Self::timer`] also reads the deadline kept after the list
    /// ran out).
    pub fn next_attempt_timer(&self) -> Option<Instant> {
        self.timers.get(Timer::NextAttempt)
    }

    /// When the DNS tail ends, while a won race still waits for answers (HEv3 §6).
    pub fn dns_tail_deadline(&self) -> Option<Instant> {
        self.timers.get(Timer::DnsTail)
    }

    // ---- internals ----

    /// Re-derives the timers that follow the race's state.
    pub(super) fn rearm(&mut self) {
        let running = self.phase.is_running();
        if !running {
            // An ended race waits for nothing but the DNS tail its win chose: every other
            // derivation below gives `None` then, so it is not computed.
            let tail = self.timers.get(Timer::DnsTail);
            self.timers.stop_all();
            if matches!(self.phase, RacePhase::Won { .. }) && self.resolution.pending() {
                self.timers.set(Timer::DnsTail, tail);
            }
            return;
        }
        let attempt_timeout = match self.live {
            0 => None,
            _ => self
                .attempts
                .iter()
                .filter(|a| a.in_flight())
                .map(|a| a.timeout_at)
                .min(),
        };
        self.timers.set(Timer::AttemptTimeout, attempt_timeout);
        let rd = match self.phase {
            RacePhase::Resolving => self.resolution.deadline(),
            _ => None,
        };
        self.timers.set(Timer::ResolutionDelay, rd);
        // The HTTPS wait: `https_wait` after the first positive answer (never before the
        // Resolution Delay ends), while an ECH-capable race's HTTPS answer is pending.
        let https_wait = self
            .resolution
            .first_positive_at()
            .filter(|_| self.resolution.holds_tls() && !self.policy.protected_dns)
            .map(|t| t + self.policy.https_wait.max(self.policy.resolution_delay));
        self.timers.set(Timer::HttpsWait, https_wait);
        let next = (matches!(self.phase, RacePhase::Racing) && self.has_candidate())
            .then(|| self.launch_gate());
        self.timers.set(Timer::NextAttempt, next);
        // A running race has not won, so it has no DNS tail yet.
        self.timers.set(Timer::DnsTail, None);
    }
}
