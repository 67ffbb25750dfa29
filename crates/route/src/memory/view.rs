//! [`MemoryView`]: what route memory knows about one origin on one network, as the race
//! reads it and learns into it.

use std::net::SocketAddr;
use std::time::Duration;

use fastfallback_proto::{Family, Instant};

use super::{
    FamilyRecord, Lesson, LessonKind, MAX_ROUTES_PER_ORIGIN, QUIC_BROKEN_FOR, RouteMemory,
    RouteRecord, slot, teaches_family,
};

/// What route memory knows about one origin on one network, as plain data: the race's input.
///
/// A race takes a view when it starts ([`RouteDatabase::view`](super::RouteDatabase::view)),
/// reads it while it orders and paces attempts, and applies its own lessons to it
/// ([`MemoryView::learn`]). It never sees what other races learn after its start.
///
/// ```
/// use fastfallback_route::{Lesson, LessonKind, MemoryView, RouteMemory};
/// use fastfallback_proto::{AttemptErrorKind, Instant, Phase};
/// use std::time::Duration;
///
/// let mut view = MemoryView::empty(RouteMemory::default());
/// let target = "[2001:db8::a]:443".parse().unwrap();
/// let t0 = Instant::from_millis(0);
/// let refused = LessonKind::Failed { kind: AttemptErrorKind::Refused, phase: Phase::Tcp };
/// view.learn(&Lesson { target, at: t0, kind: refused });
/// assert!(view.is_postponed(target, t0 + Duration::from_secs(1)));
/// view.learn(&Lesson { target, at: t0, kind: LessonKind::Connected { rtt: Duration::from_millis(20) } });
/// assert_eq!(view.srtt(target, t0), Some(Duration::from_millis(20)));
/// ```
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct MemoryView {
    /// [`RouteMemory::enabled`] and [`RouteMemory::ttl`], the only settings a view reads:
    /// kept alone, the view is 16 bytes smaller, which keeps the race that holds it within
    /// the allocator's small-chunk range (docs/benchmarks.md). The TTL is kept in whole
    /// nanoseconds (saturating at 584 years), 8 bytes less than a `Duration`, for room for
    /// the QUIC record.
    enabled: bool,
    ttl_nanos: u64,
    pub(super) routes: Vec<(SocketAddr, RouteRecord)>,
    pub(super) families: [FamilyRecord; 2],
    /// Whether routes are learned locally; not for an IP literal, whose one route is never
    /// reordered.
    pub(super) keeps_routes: bool,
    /// Until when QUIC follows TCP: the origin's broken-QUIC record, or the network's when
    /// the origin has none.
    pub(super) quic_broken_until: Option<Instant>,
}

impl MemoryView {
    /// A view that knows nothing: a first contact on a new network.
    pub fn empty(config: RouteMemory) -> Self {
        Self {
            enabled: config.enabled,
            ttl_nanos: u64::try_from(config.ttl.as_nanos()).unwrap_or(u64::MAX),
            routes: Vec::new(),
            families: [FamilyRecord::default(); 2],
            keeps_routes: true,
            quic_broken_until: None,
        }
    }

    /// A view with memory turned off: it knows nothing and learns nothing.
    pub fn disabled() -> Self {
        Self::empty(RouteMemory {
            enabled: false,
            ..RouteMemory::default()
        })
    }

    /// Whether memory is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// How long an entry is believed ([`RouteMemory::ttl`]).
    fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl_nanos)
    }

    /// Forgets what this view knows of routes and families but keeps learning: a race that
    /// ignores history ([`RouteMemory::explore_one_in`]).
    ///
    /// A broken-QUIC record is kept: its own backoff already brings QUIC back when the period
    /// ends (as Chromium's broken alternative services do), and exploring it would cost one
    /// race in `explore_one_in` a whole attempt delay on a network that blocks UDP (the
    /// quic-net bench's "QUIC known broken" row showed one such 313 ms round).
    pub fn forget(&mut self) {
        self.routes.clear();
        self.families = [FamilyRecord::default(); 2];
    }

    /// Applies one lesson locally, as the store will when the driver hands it over.
    pub fn learn(&mut self, lesson: &Lesson) {
        if !self.enabled {
            return;
        }
        match lesson.kind {
            // Locally the first period is enough: the store knows how many came before.
            LessonKind::QuicWorked => self.quic_broken_until = None,
            LessonKind::QuicBroken => {
                let until = lesson.at + QUIC_BROKEN_FOR;
                self.quic_broken_until = self.quic_broken_until.max(Some(until));
            }
            _ if teaches_family(lesson.target) => {
                self.families[slot(Family::of(lesson.target.ip()))].learn(lesson.kind, lesson.at);
            }
            _ => {}
        }
        if !self.keeps_routes || lesson.kind.is_about_quic() {
            return;
        }
        if let Some((_, r)) = self.routes.iter_mut().find(|(t, _)| *t == lesson.target) {
            r.learn(lesson.kind, lesson.at);
        } else if self.routes.len() < MAX_ROUTES_PER_ORIGIN {
            let mut r = RouteRecord::default();
            r.learn(lesson.kind, lesson.at);
            self.routes.push((lesson.target, r));
        }
    }

    fn route(&self, target: SocketAddr) -> Option<&RouteRecord> {
        self.routes
            .iter()
            .find(|(t, _)| *t == target)
            .map(|(_, r)| r)
    }

    /// Whether `target` failed within the TTL and has not connected since (OkHttp's
    /// `shouldPostpone`, with expiry).
    pub fn is_postponed(&self, target: SocketAddr, now: Instant) -> bool {
        let ttl = self.ttl();
        self.route(target)
            .and_then(|r| r.failed_at)
            .is_some_and(|at| now - at <= ttl)
    }

    /// The route's smoothed RTT, if known and fresh.
    pub fn srtt(&self, target: SocketAddr, now: Instant) -> Option<Duration> {
        self.route(target).and_then(|r| r.rtt.get(now, self.ttl()))
    }

    /// The family's recent smoothed RTT on this network, if known and fresh.
    pub fn family_srtt(&self, family: Family, now: Instant) -> Option<Duration> {
        self.families[slot(family)].rtt.get(now, self.ttl())
    }

    /// Whether `family` had a path failure within the TTL with no success since.
    pub fn family_path_failed(&self, family: Family, now: Instant) -> bool {
        self.families[slot(family)]
            .path_failure_at
            .is_some_and(|at| now - at <= self.ttl())
    }

    /// Whether history says `family` should not lead, given the other family is available: it
    /// had a path failure and the other did not, or its RTT is known to exceed the other
    /// family's by more than `margin`.
    pub fn family_is_worse(&self, family: Family, margin: Duration, now: Instant) -> bool {
        if self.family_path_failed(family, now) && !self.family_path_failed(family.other(), now) {
            return true;
        }
        match (
            self.family_srtt(family, now),
            self.family_srtt(family.other(), now),
        ) {
            (Some(a), Some(b)) => a > b + margin,
            _ => false,
        }
    }

    /// Whether QUIC to the origin is believed broken at `now` ([`LessonKind::QuicBroken`]):
    /// the race then lets TCP lead each address.
    pub fn is_quic_broken(&self, now: Instant) -> bool {
        self.quic_broken_until(now).is_some()
    }

    /// Until when QUIC is believed broken, if it is at `now`.
    pub fn quic_broken_until(&self, now: Instant) -> Option<Instant> {
        self.quic_broken_until.filter(|until| now < *until)
    }

    /// Whether this view knows anything (a route, a family record or a broken QUIC).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
            && self.families == [FamilyRecord::default(); 2]
            && self.quic_broken_until.is_none()
    }
}
