//! The race's timers as a table: one deadline per [`Timer`] kind (quinn-proto's
//! `TimerTable`). [`crate::FastFallbackExchangeFinder::poll_timeout`] is the earliest entry;
//! [`crate::FastFallbackExchangeFinder::handle_timeout`] fires every entry that has passed.

use fastfallback_proto::Instant;

/// The kinds of timer a race runs. The order of [`Timer::ALL`] is the order in which timers
/// that expire at the same instant fire.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum Timer {
    /// The overall connect deadline (reference profile P12). Firing fails the race.
    Deadline,
    /// The earliest per-attempt time limit among attempts in flight. Firing cancels every
    /// attempt whose limit has passed.
    AttemptTimeout,
    /// The Resolution Delay (RFC 8305 §3, HEv3 §4.2), while the race waits to move on. Firing
    /// lets it move on with the answers it has.
    ResolutionDelay,
    /// When the next attempt may start: the Connection Attempt Delay after the latest start
    /// (HEv3 §6), or the end of a hold for a better answer. Armed only while an attempt is
    /// waiting for it. Firing lets the race start it. After the list runs out, the deadline
    /// is kept for a later endpoint (profile P7), and
    /// [`crate::FastFallbackExchangeFinder::timer`] reads it while it bounds one.
    NextAttempt,
    /// The end of the DNS tail after a win (HEv3 §6: keep taking answers for about a second).
    /// Firing abandons the queries still pending.
    DnsTail,
    /// The end of the HTTPS wait of an ECH-capable race (`FallbackPolicy::https_wait` after
    /// the first positive answer), while an HTTPS answer is pending. Firing gives up on it,
    /// and held attempts go on without ECH.
    HttpsWait,
}

impl Timer {
    /// Every kind, in firing order.
    pub const ALL: [Self; 6] = [
        Self::Deadline,
        Self::AttemptTimeout,
        Self::HttpsWait,
        Self::ResolutionDelay,
        Self::NextAttempt,
        Self::DnsTail,
    ];

    fn index(self) -> usize {
        match self {
            Self::Deadline => 0,
            Self::AttemptTimeout => 1,
            Self::ResolutionDelay => 2,
            Self::NextAttempt => 3,
            Self::DnsTail => 4,
            Self::HttpsWait => 5,
        }
    }
}

/// One optional deadline per [`Timer`], and the earliest of them, kept as they change: the
/// driver asks for the earliest after every turn, far more often than a timer moves.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub(crate) struct TimerTable {
    at: [Option<Instant>; 6],
    /// The earliest of `at`.
    next: Option<Instant>,
}

impl TimerTable {
    pub(crate) fn set(&mut self, timer: Timer, at: Option<Instant>) {
        let slot = &mut self.at[timer.index()];
        // Most calls (the race re-derives every timer after each input) change nothing.
        if *slot == at {
            return;
        }
        let old = std::mem::replace(slot, at);
        match at {
            // No later than every other: the earliest now.
            Some(t) if self.next.is_none_or(|n| t <= n) => self.next = at,
            // The earliest moved later, or stopped: another may be the earliest now.
            _ if old.is_some() && old == self.next => self.next = self.scan(),
            _ => {}
        }
    }

    /// A table with only the race's deadline armed: every race's table at its start.
    #[inline]
    pub(crate) fn with_deadline(at: Instant) -> Self {
        let mut deadlines = [None; 6];
        deadlines[Timer::Deadline.index()] = Some(at);
        Self {
            at: deadlines,
            next: Some(at),
        }
    }

    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer.index()]
    }

    pub(crate) fn stop_all(&mut self) {
        *self = Self::default();
    }

    /// The earliest deadline, if any timer is armed.
    #[inline]
    pub(crate) fn next(&self) -> Option<Instant> {
        self.next
    }

    /// The earliest deadline, found by looking at every timer.
    fn scan(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// Disarms and returns every timer that has expired at `now`, in firing order.
    pub(crate) fn expire(&mut self, now: Instant) -> impl Iterator<Item = Timer> + use<> {
        let mut fired = [None; 6];
        for (k, t) in Timer::ALL.into_iter().enumerate() {
            if self.get(t).is_some_and(|at| at <= now) {
                self.set(t, None);
                fired[k] = Some(t);
            }
        }
        fired.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept earliest deadline agrees with a scan of every timer after any sequence of
    /// moves: earlier, later, stopped, set again to the same instant.
    #[test]
    fn the_kept_earliest_deadline_follows_every_move() {
        let at = |ms| Some(Instant::from_millis(ms));
        let moves = [
            (Timer::Deadline, at(100)),
            (Timer::AttemptTimeout, at(50)),
            (Timer::NextAttempt, at(50)),
            (Timer::AttemptTimeout, at(80)),
            (Timer::NextAttempt, None),
            (Timer::DnsTail, at(80)),
            (Timer::AttemptTimeout, None),
            (Timer::DnsTail, at(80)),
            (Timer::DnsTail, at(120)),
            (Timer::HttpsWait, at(10)),
            (Timer::HttpsWait, None),
            (Timer::Deadline, None),
            (Timer::DnsTail, None),
        ];
        let mut t = TimerTable::default();
        for (timer, when) in moves {
            t.set(timer, when);
            assert_eq!(t.next(), t.scan(), "after setting {timer:?} to {when:?}");
        }
        assert_eq!(t.next(), None);
    }

    #[test]
    fn a_table_with_only_the_deadline_is_one_with_the_deadline_set() {
        let at = Instant::from_millis(10_000);
        let mut set = TimerTable::default();
        set.set(Timer::Deadline, Some(at));
        assert_eq!(TimerTable::with_deadline(at), set);
        assert_eq!(TimerTable::with_deadline(at).next(), Some(at));
    }

    #[test]
    fn next_is_the_earliest_and_expiry_fires_in_table_order() {
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::DnsTail, Some(Instant::from_millis(5)));
        t.set(Timer::Deadline, Some(Instant::from_millis(5)));
        t.set(Timer::NextAttempt, Some(Instant::from_millis(9)));
        assert_eq!(t.next(), Some(Instant::from_millis(5)));
        let fired: Vec<Timer> = t.expire(Instant::from_millis(5)).collect();
        assert_eq!(fired, [Timer::Deadline, Timer::DnsTail]);
        assert_eq!(t.next(), Some(Instant::from_millis(9)));
    }
}
