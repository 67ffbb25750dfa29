//! Route memory: failures, RTT per route, and health per address family.
//!
//! OkHttp's `RouteDatabase` remembers only post-connect failures (its issue #7553), never
//! forgets and only reorders. Ours records TCP and TLS failures too, keeps an RTT estimate per
//! route and per family, is bounded in size and expires entries. Its contents feed the ordering
//! ([`crate::order`]) and the adaptive Connection Attempt Delay.
//!
//! RTT samples come in two kinds:
//! - a **measured** sample, when a TCP handshake completes: folded in with RFC 6298's
//!   `srtt = 7/8 srtt + 1/8 r`;
//! - a **lower bound**, when an attempt is cancelled after `e` without its handshake finishing
//!   (it lost the race, or timed out): the path is at least `e` slow, so `srtt = max(srtt, e)`.
//!   This one mechanism lets a blackholed or very slow family sort behind the other on the next
//!   contact, for this host and (through the family record) for new hosts.
//!
//! History is per network: the driver should [`RouteDatabase::clear`] it when the network
//! changes (HEv3 §5.3: history must not cross provisioning domains).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use fastfallback_proto::{AttemptErrorKind, Family, Instant};

/// Settings for route memory.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct RouteMemory {
    /// Whether to remember anything.
    pub enabled: bool,
    /// How long an entry is believed. RFC 6555 §4.2 suggests flushing after about 10 minutes.
    pub ttl: Duration,
    /// The most routes remembered; the least recently updated are forgotten first.
    pub max_routes: usize,
}

impl Default for RouteMemory {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl: Duration::from_secs(600),
            max_routes: 1024,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Rtt {
    srtt: Option<Duration>,
    updated: Instant,
}

impl Rtt {
    fn measured(&mut self, r: Duration, now: Instant) {
        self.srtt = Some(match self.srtt {
            None => r,
            Some(s) => (s * 7 + r) / 8,
        });
        self.updated = now;
    }

    fn at_least(&mut self, floor: Duration, now: Instant) {
        if self.srtt.is_none_or(|s| s < floor) {
            self.srtt = Some(floor);
        }
        self.updated = now;
    }

    fn get(&self, now: Instant, ttl: Duration) -> Option<Duration> {
        self.srtt.filter(|_| now - self.updated <= ttl)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct RouteRecord {
    rtt: Rtt,
    failed_at: Option<Instant>,
    failures: u32,
    touched: Instant,
}

#[derive(Clone, Copy, Debug, Default)]
struct FamilyRecord {
    rtt: Rtt,
    /// When the family last had a path failure (unreachable or timeout) with no success since.
    path_failure_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Inner {
    routes: HashMap<SocketAddr, RouteRecord>,
    families: [FamilyRecord; 2],
}

/// Memory of past routes, shared by all races of a client. Thread-safe; every method takes
/// `now`.
///
/// ```
/// use fastfallback_route::{RouteDatabase, RouteMemory};
/// use fastfallback_proto::{AttemptErrorKind, Instant};
/// use std::time::Duration;
///
/// let db = RouteDatabase::new(RouteMemory::default());
/// let route = "[2001:db8::a]:443".parse().unwrap();
/// let t0 = Instant::from_millis(0);
/// db.failed(route, AttemptErrorKind::Refused, t0);
/// assert!(db.is_postponed(route, t0 + Duration::from_secs(1)));
/// db.connected(route, Duration::from_millis(20), t0 + Duration::from_secs(2));
/// assert!(!db.is_postponed(route, t0 + Duration::from_secs(2)));
/// assert_eq!(db.srtt(route, t0 + Duration::from_secs(2)), Some(Duration::from_millis(20)));
/// ```
#[derive(Debug, Default)]
pub struct RouteDatabase {
    config: RouteMemory,
    inner: Mutex<Inner>,
}

fn slot(f: Family) -> usize {
    match f {
        Family::V6 => 0,
        Family::V4 => 1,
    }
}

impl RouteDatabase {
    /// An empty database.
    pub fn new(config: RouteMemory) -> Self {
        Self {
            config,
            inner: Mutex::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> RouteMemory {
        self.config
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // A panic while holding the lock cannot leave `Inner` half-updated in a way that
        // matters (every update is a single field write), so a poisoned lock is still usable.
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    fn record(&self, inner: &mut Inner, route: SocketAddr, now: Instant) -> RouteRecord {
        if !inner.routes.contains_key(&route) && inner.routes.len() >= self.config.max_routes {
            self.evict(inner, now);
        }
        inner.routes.get(&route).copied().unwrap_or_default()
    }

    /// Drops expired entries, then the least recently touched eighth if still full.
    fn evict(&self, inner: &mut Inner, now: Instant) {
        let ttl = self.config.ttl;
        inner.routes.retain(|_, r| now - r.touched <= ttl);
        if inner.routes.len() < self.config.max_routes {
            return;
        }
        let mut ages: Vec<(Instant, SocketAddr)> =
            inner.routes.iter().map(|(k, r)| (r.touched, *k)).collect();
        ages.sort_unstable();
        let drop = (self.config.max_routes / 8).max(1).min(ages.len());
        for (_, k) in &ages[..drop] {
            inner.routes.remove(k);
        }
    }

    /// A TCP handshake to `route` completed in `rtt`. Clears the route's failure record and the
    /// family's path-failure mark.
    pub fn connected(&self, route: SocketAddr, rtt: Duration, now: Instant) {
        if !self.config.enabled || self.config.max_routes == 0 {
            return;
        }
        self.with(|inner| {
            let mut r = self.record(inner, route, now);
            r.rtt.measured(rtt, now);
            r.failed_at = None;
            r.failures = 0;
            r.touched = now;
            inner.routes.insert(route, r);
            let fam = &mut inner.families[slot(Family::of(route.ip()))];
            fam.rtt.measured(rtt, now);
            fam.path_failure_at = None;
        });
    }

    /// An attempt to `route` was stopped after `elapsed` without its handshake finishing: the
    /// route (and its family) is at least that slow right now.
    pub fn unfinished(&self, route: SocketAddr, elapsed: Duration, now: Instant) {
        if !self.config.enabled || self.config.max_routes == 0 {
            return;
        }
        self.with(|inner| {
            let mut r = self.record(inner, route, now);
            r.rtt.at_least(elapsed, now);
            r.touched = now;
            inner.routes.insert(route, r);
            inner.families[slot(Family::of(route.ip()))]
                .rtt
                .at_least(elapsed, now);
        });
    }

    /// An attempt to `route` failed (TCP or TLS). The route is postponed for the TTL; a path
    /// failure (unreachable, timeout) also marks the family.
    pub fn failed(&self, route: SocketAddr, kind: AttemptErrorKind, now: Instant) {
        if !self.config.enabled
            || self.config.max_routes == 0
            || kind == AttemptErrorKind::Cancelled
        {
            return;
        }
        self.with(|inner| {
            let mut r = self.record(inner, route, now);
            r.failed_at = Some(now);
            r.failures = r.failures.saturating_add(1);
            r.touched = now;
            inner.routes.insert(route, r);
            if kind.is_path_failure() {
                inner.families[slot(Family::of(route.ip()))].path_failure_at = Some(now);
            }
        });
    }

    /// Whether `route` failed within the TTL and has not connected since (OkHttp's
    /// `shouldPostpone`, with expiry).
    pub fn is_postponed(&self, route: SocketAddr, now: Instant) -> bool {
        let ttl = self.config.ttl;
        self.with(|inner| {
            inner
                .routes
                .get(&route)
                .and_then(|r| r.failed_at)
                .is_some_and(|at| now - at <= ttl)
        })
    }

    /// The route's smoothed RTT, if known and fresh.
    pub fn srtt(&self, route: SocketAddr, now: Instant) -> Option<Duration> {
        let ttl = self.config.ttl;
        self.with(|inner| inner.routes.get(&route).and_then(|r| r.rtt.get(now, ttl)))
    }

    /// The family's recent smoothed RTT on this network, if known and fresh.
    pub fn family_srtt(&self, family: Family, now: Instant) -> Option<Duration> {
        let ttl = self.config.ttl;
        self.with(|inner| inner.families[slot(family)].rtt.get(now, ttl))
    }

    /// Whether `family` had a path failure within the TTL with no success since.
    pub fn family_path_failed(&self, family: Family, now: Instant) -> bool {
        let ttl = self.config.ttl;
        self.with(|inner| {
            inner.families[slot(family)]
                .path_failure_at
                .is_some_and(|at| now - at <= ttl)
        })
    }

    /// Whether history says `family` should not lead the next race, given `other` is
    /// available: it had a path failure and `other` did not, or its RTT is known to exceed the
    /// other family's by more than `margin`.
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

    /// Number of routes remembered (expired ones included until evicted).
    pub fn len(&self) -> usize {
        self.with(|inner| inner.routes.len())
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything, for example on a network change.
    pub fn clear(&self) {
        self.with(|inner| *inner = Inner::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn at(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    const V6: &str = "[2001:db8::a]:443";
    const V4: &str = "192.0.2.1:443";

    #[test]
    fn tcp_failures_postpone_the_route_until_ttl() {
        let db = RouteDatabase::new(RouteMemory {
            ttl: ms(1000),
            ..Default::default()
        });
        let r = V6.parse().unwrap();
        db.failed(r, AttemptErrorKind::Refused, at(0));
        assert!(db.is_postponed(r, at(1000)));
        assert!(!db.is_postponed(r, at(1001)));
    }

    #[test]
    fn tls_failures_are_remembered_too() {
        let db = RouteDatabase::new(RouteMemory::default());
        let r = V4.parse().unwrap();
        db.failed(r, AttemptErrorKind::Tls, at(0));
        assert!(db.is_postponed(r, at(5)));
    }

    #[test]
    fn cancellation_is_not_a_failure() {
        let db = RouteDatabase::new(RouteMemory::default());
        let r = V4.parse().unwrap();
        db.failed(r, AttemptErrorKind::Cancelled, at(0));
        assert!(!db.is_postponed(r, at(1)));
        assert!(db.is_empty());
    }

    #[test]
    fn srtt_follows_rfc6298_smoothing() {
        let db = RouteDatabase::new(RouteMemory::default());
        let r = V4.parse().unwrap();
        db.connected(r, ms(80), at(0));
        db.connected(r, ms(160), at(1));
        assert_eq!(db.srtt(r, at(2)), Some(ms(90)));
    }

    #[test]
    fn unfinished_attempt_raises_srtt_to_a_lower_bound() {
        let db = RouteDatabase::new(RouteMemory::default());
        let r = V6.parse().unwrap();
        db.connected(r, ms(20), at(0));
        db.unfinished(r, ms(270), at(300));
        assert_eq!(db.srtt(r, at(300)), Some(ms(270)));
        assert_eq!(db.family_srtt(Family::V6, at(300)), Some(ms(270)));
        db.unfinished(r, ms(100), at(400));
        assert_eq!(
            db.srtt(r, at(400)),
            Some(ms(270)),
            "a smaller bound changes nothing"
        );
    }

    #[test]
    fn entries_expire_after_ttl() {
        let db = RouteDatabase::new(RouteMemory {
            ttl: ms(100),
            ..Default::default()
        });
        let r = V4.parse().unwrap();
        db.connected(r, ms(20), at(0));
        assert_eq!(db.srtt(r, at(100)), Some(ms(20)));
        assert_eq!(db.srtt(r, at(101)), None);
        assert_eq!(db.family_srtt(Family::V4, at(101)), None);
    }

    #[test]
    fn size_stays_bounded_and_oldest_go_first() {
        let db = RouteDatabase::new(RouteMemory {
            max_routes: 16,
            ..Default::default()
        });
        for i in 0..100u16 {
            let r = SocketAddr::new("192.0.2.1".parse().unwrap(), 1000 + i);
            db.connected(r, ms(10), at(u64::from(i)));
            assert!(db.len() <= 16);
        }
        let newest = SocketAddr::new("192.0.2.1".parse().unwrap(), 1099);
        let oldest = SocketAddr::new("192.0.2.1".parse().unwrap(), 1000);
        assert!(db.srtt(newest, at(100)).is_some());
        assert!(db.srtt(oldest, at(100)).is_none());
    }

    #[test]
    fn path_failure_marks_family_worse_until_success() {
        let db = RouteDatabase::new(RouteMemory::default());
        let r = V6.parse().unwrap();
        db.failed(r, AttemptErrorKind::Unreachable, at(0));
        assert!(db.family_is_worse(Family::V6, ms(100), at(1)));
        assert!(!db.family_is_worse(Family::V4, ms(100), at(1)));
        db.connected("[2001:db8::b]:443".parse().unwrap(), ms(20), at(2));
        assert!(!db.family_is_worse(Family::V6, ms(100), at(3)));
    }

    #[test]
    fn slow_family_is_worse_only_beyond_the_margin() {
        let db = RouteDatabase::new(RouteMemory::default());
        db.connected(V4.parse().unwrap(), ms(20), at(0));
        db.connected(V6.parse().unwrap(), ms(100), at(0));
        assert!(!db.family_is_worse(Family::V6, ms(100), at(1)));
        db.unfinished(V6.parse().unwrap(), ms(270), at(1));
        assert!(db.family_is_worse(Family::V6, ms(100), at(2)));
    }

    #[test]
    fn disabled_memory_records_nothing() {
        let db = RouteDatabase::new(RouteMemory {
            enabled: false,
            ..Default::default()
        });
        db.failed(V4.parse().unwrap(), AttemptErrorKind::Refused, at(0));
        db.connected(V4.parse().unwrap(), ms(1), at(0));
        assert!(db.is_empty());
    }
}
