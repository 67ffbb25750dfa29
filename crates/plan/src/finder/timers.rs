//! Reading the race's deadlines one [`Timer`] kind at a time.
//!
//! [`FastFallbackExchangeFinder::poll_timeout`] is the earliest *armed* timer: the only
//! instant a driver must wake up for. A sans-IO user who drives the race itself (a test, a
//! runtime of its own) often needs to know which deadline that is, and when a deadline that
//! is not armed still bounds the race; [`FastFallbackExchangeFinder::timer`] says.

use fastfallback_proto::Instant;

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
