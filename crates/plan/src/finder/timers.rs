//! Reading the race's deadlines one [`Timer`] kind at a time.
//!
//! [`FastFallbackExchangeFinder::poll_timeout`] is the earliest *armed* timer: the only
//! instant a driver must wake up for. A sans-IO user who drives the race itself (a test, a
//! runtime of its own) often needs to know which deadline that is;
//! [`FastFallbackExchangeFinder::timer`] names it.

use fastfallback_proto::Instant;

use super::FastFallbackExchangeFinder;
use crate::timer::Timer;

impl FastFallbackExchangeFinder {
    /// The deadline of timer kind `timer`, if it bounds the race as it stands (after the
    /// inputs and polls so far).
    ///
    /// Each reads as armed: [`Self::poll_timeout`] is the earliest of them.
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
        self.timers.get(timer)
    }
}
