//! Broken-QUIC memory: when QUIC to an origin did not work while TCP did, later races let
//! TCP lead for a while, and the while doubles each time it happens again.
//!
//! HEv3 §5.3 lets history shape the order, and Chromium's broken alternative services
//! are the model: a first failure keeps QUIC back for 5 minutes, each further one doubles
//! that, up to 2⁹ times (about 43 hours), and one QUIC success forgets it all. Ours differs
//! in one way: a broken QUIC is not skipped, it follows TCP (the race still tries it one
//! attempt delay later), so a network where TCP is the broken one still connects.
//!
//! Two records learn the same lessons: the origin's own, and the network's, which stands in
//! for origins that have none (a network that blocks UDP blocks it for every host; Chromium
//! keeps the same signal as "QUIC worked on this network"). A record is forgotten one TTL
//! after its broken period ends, unless QUIC breaks again first.

use std::time::Duration;

use fastfallback_proto::Instant;

use super::LessonKind;

/// How long QUIC is kept back after it is first found broken (Chromium's initial delay for
/// a broken alternative service).
pub const QUIC_BROKEN_FOR: Duration = Duration::from_secs(300);

/// The most times [`QUIC_BROKEN_FOR`] is doubled: 5 min × 2⁹ ≈ 43 h (Chromium's cap).
const MAX_DOUBLINGS: u8 = 9;

/// What is remembered of QUIC for one origin, or for a network.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) struct QuicRecord {
    /// QUIC follows TCP until this instant.
    pub(super) broken_until: Instant,
    /// How many times in a row QUIC was found broken with no success in between: the
    /// backoff's exponent, plus one.
    pub(super) marks: u8,
}

impl QuicRecord {
    /// How long QUIC is kept back after its `marks`-th failure in a row.
    pub(super) fn backoff(marks: u8) -> Duration {
        let doublings = marks.saturating_sub(1).min(MAX_DOUBLINGS);
        QUIC_BROKEN_FOR * (1u32 << doublings)
    }

    /// `record` after a lesson learned `at`: a success forgets it, a failure starts or
    /// lengthens it, and any other lesson leaves it as it was.
    pub(super) fn learn(record: Option<Self>, kind: LessonKind, at: Instant) -> Option<Self> {
        match kind {
            LessonKind::QuicWorked => None,
            LessonKind::QuicBroken => {
                let marks = record.map_or(0, |r| r.marks).saturating_add(1);
                Some(Self {
                    broken_until: at + Self::backoff(marks),
                    marks,
                })
            }
            _ => record,
        }
    }

    /// The end of the broken period, if it is still running at `now`.
    pub(super) fn broken_at(&self, now: Instant) -> Option<Instant> {
        (now < self.broken_until).then_some(self.broken_until)
    }

    /// Whether the record is still worth keeping at `now`: until one `ttl` after its broken
    /// period ends (a failure within that time lengthens the next period).
    pub(super) fn alive(&self, now: Instant, ttl: Duration) -> bool {
        now <= self.broken_until + ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Instant {
        Instant::from_millis(s * 1000)
    }

    #[test]
    fn each_failure_in_a_row_doubles_the_time_quic_is_kept_back_up_to_about_two_days() {
        let mut record = None;
        let mut periods = Vec::new();
        for _ in 0..12 {
            record = QuicRecord::learn(record, LessonKind::QuicBroken, at(0));
            periods.push(record.unwrap().broken_until - at(0));
        }
        let minutes: Vec<u64> = periods.iter().map(|d| d.as_secs() / 60).collect();
        assert_eq!(
            minutes,
            [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 2560, 2560]
        );
    }

    #[test]
    fn one_success_forgets_every_failure() {
        let broken = QuicRecord::learn(None, LessonKind::QuicBroken, at(0));
        let broken = QuicRecord::learn(broken, LessonKind::QuicBroken, at(1));
        assert_eq!(broken.unwrap().marks, 2);
        assert_eq!(
            QuicRecord::learn(broken, LessonKind::QuicWorked, at(2)),
            None
        );
        let again = QuicRecord::learn(None, LessonKind::QuicBroken, at(3)).unwrap();
        assert_eq!(again.broken_until, at(3) + QUIC_BROKEN_FOR);
    }

    #[test]
    fn a_record_is_broken_until_its_period_ends_and_kept_one_ttl_longer() {
        let r = QuicRecord::learn(None, LessonKind::QuicBroken, at(0)).unwrap();
        assert_eq!(r.broken_at(at(299)), Some(at(300)));
        assert_eq!(r.broken_at(at(300)), None);
        let ttl = Duration::from_secs(600);
        assert!(r.alive(at(900), ttl));
        assert!(!r.alive(at(901), ttl));
    }

    #[test]
    fn route_lessons_leave_the_record_as_it_was() {
        let r = QuicRecord::learn(None, LessonKind::QuicBroken, at(0));
        let rtt = LessonKind::Connected {
            rtt: Duration::from_millis(20),
        };
        assert_eq!(QuicRecord::learn(r, rtt, at(1)), r);
        assert_eq!(QuicRecord::learn(None, rtt, at(1)), None);
    }
}
