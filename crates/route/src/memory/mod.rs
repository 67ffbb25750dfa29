//! Route memory: failures, RTT per route, and health per address family, as data.
//!
//! OkHttp's `RouteDatabase` remembers only post-connect failures (its issue #7553), never
//! forgets and only reorders. Ours records TCP and TLS failures too, keeps an RTT estimate per
//! route and per family, is bounded in size and expires entries.
//!
//! The race never touches the shared store. It works like quinn-proto:
//!
//! ```text
//!   RouteDatabase ──view(network, origin, now)──▶ MemoryView ──▶ race (reads, and learns locally)
//!        ▲                                                           │
//!        └───────────── learn(network, origin, lessons) ◀── Lesson ──┘
//! ```
//!
//! - [`MemoryView`] is a copy of what the store knows about one origin on one network, taken
//!   when a race starts. The race orders routes and sizes its Connection Attempt Delay from it,
//!   and applies its own lessons to it, so a race's timeline depends only on its inputs, never
//!   on what concurrent races do.
//! - [`Lesson`]s leave the race as outputs; the driver applies them to the [`RouteDatabase`].
//!
//! RTT samples come in two kinds:
//! - a **measured** sample, when a TCP handshake completes: folded in with RFC 6298's
//!   `srtt = 7/8 srtt + 1/8 r`;
//! - a **lower bound**, when an attempt is stopped after `e` without its handshake finishing (it
//!   lost the race, or the caller gave up): the path is at least `e` slow, so
//!   `srtt = max(srtt, e)`. This one mechanism lets a blackholed or very slow family sort behind
//!   the other on the next contact, for this host and (through the family record) for new
//!   hosts. A bound is not a sample: the next measured sample replaces it outright, so a path
//!   that recovered is believed at once.
//!
//! History is partitioned as HEv3 §5.3 asks (R-21): per network ([`NetworkId`]: "MUST NOT be
//! used across different PvDs"; memory of other networks is set aside, and used again when the
//! network comes back), and per origin (routes learned for one host never reorder another's).
//! Convergence ("clients with different histories eventually converge") comes from expiry
//! ([`RouteMemory::ttl`]) and from races that ignore history now and then
//! ([`RouteMemory::explore_one_in`]).
//!
//! QUIC has a record of its own (the `quic` module): a UDP path that does not work says
//! nothing about TCP to the same address, so a QUIC attempt's failure never postpones the
//! route or marks its family. When TCP wins while QUIC did not, QUIC follows TCP for a while
//! that doubles each time ([`LessonKind::QuicBroken`], [`QUIC_BROKEN_FOR`]).
//!
//! The store also keeps each origin's HTTP/3 alternatives from its responses' `Alt-Svc`
//! fields (RFC 7838; the `alt_svc` module): [`RouteDatabase::learn_alt_svc`] takes a field
//! value, and [`RouteDatabase::alternatives`] gives a race the fresh ones.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use fastfallback_proto::{AttemptErrorKind, Family, FxBuildHasher, Instant, Phase};

use crate::{Address, Host};

mod alt_svc;
mod key;
mod persist;
mod quic;
mod view;

use alt_svc::AltRecord;
use key::{OriginKey, OriginRef};
use quic::QuicRecord;

pub use alt_svc::MAX_KEPT as MAX_ALTERNATIVES_KEPT;
pub use persist::{MAX_FILE_BYTES, PersistError};
pub use quic::QUIC_BROKEN_FOR;
pub use view::MemoryView;

/// Settings for route memory.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct RouteMemory {
    /// Whether to remember anything.
    pub enabled: bool,
    /// How long an entry is believed. RFC 6555 §4.2 suggests flushing after about 10 minutes.
    pub ttl: Duration,
    /// The most routes remembered per network; the least recently updated origins are
    /// forgotten first.
    pub max_routes: usize,
    /// One race in this many ignores history (it orders and paces as a first contact would,
    /// and still learns), so a family that has recovered is noticed (HEv3 §5.3: clients with
    /// different histories "MUST" eventually converge). 0 never ignores it.
    pub explore_one_in: u32,
}

impl Default for RouteMemory {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl: Duration::from_secs(600),
            max_routes: 1024,
            explore_one_in: 64,
        }
    }
}

/// Which network the host is on: a digest of its source prefixes and default routes, computed
/// by the driver. HEv3 §5.3 forbids using history across provisioning domains; memory is kept
/// per network id.
#[derive(Clone, Copy, Debug, Default, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct NetworkId(pub u64);

/// What one attempt taught: the race's output, applied to the [`RouteDatabase`] by the driver.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Lesson {
    /// The socket address the attempt connected to (the key of route memory).
    pub target: SocketAddr,
    /// When it was learned.
    pub at: Instant,
    /// What was learned.
    pub kind: LessonKind,
}

/// The kinds of [`Lesson`].
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum LessonKind {
    /// The TCP handshake completed in `rtt`: a measured RTT sample. Clears the route's failure
    /// record and the family's path-failure mark.
    Connected {
        /// The handshake time.
        rtt: Duration,
    },
    /// The attempt was stopped after `elapsed` before its TCP handshake finished: a lower
    /// bound on the route's RTT.
    Unfinished {
        /// How long it ran.
        elapsed: Duration,
    },
    /// The attempt failed. The route is postponed for the TTL; a path failure (unreachable or
    /// timed out) during TCP also marks the family.
    Failed {
        /// How.
        kind: AttemptErrorKind,
        /// In which step.
        phase: Phase,
    },
    /// A QUIC handshake to the origin completed: QUIC works there. Forgets the origin's
    /// broken-QUIC record and the network's.
    QuicWorked,
    /// TCP won while a QUIC attempt that had started no later than the winner did not
    /// finish: QUIC follows TCP for the origin on this network (and for origins with no
    /// record of their own) for [`QUIC_BROKEN_FOR`], doubled for each time in a row.
    QuicBroken,
}

impl LessonKind {
    /// Whether the lesson is about QUIC to the origin rather than about one route.
    pub fn is_about_quic(self) -> bool {
        matches!(self, Self::QuicWorked | Self::QuicBroken)
    }
}

#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
struct Rtt {
    srtt: Option<Duration>,
    /// Whether `srtt` is a lower bound from an unfinished attempt rather than a measurement.
    bound: bool,
    updated: Instant,
}

impl Rtt {
    fn measured(&mut self, r: Duration, now: Instant) {
        self.srtt = Some(match self.srtt {
            Some(s) if !self.bound => (s * 7 + r) / 8,
            _ => r,
        });
        self.bound = false;
        self.updated = now;
    }

    fn at_least(&mut self, floor: Duration, now: Instant) {
        if self.srtt.is_none_or(|s| s < floor) {
            self.srtt = Some(floor);
            self.bound = true;
        }
        self.updated = now;
    }

    fn get(&self, now: Instant, ttl: Duration) -> Option<Duration> {
        self.srtt.filter(|_| now - self.updated <= ttl)
    }
}

#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
struct RouteRecord {
    rtt: Rtt,
    failed_at: Option<Instant>,
    failures: u32,
    touched: Instant,
}

impl RouteRecord {
    fn learn(&mut self, kind: LessonKind, at: Instant) {
        match kind {
            LessonKind::Connected { rtt } => {
                self.rtt.measured(rtt, at);
                self.failed_at = None;
                self.failures = 0;
            }
            LessonKind::Unfinished { elapsed } => self.rtt.at_least(elapsed, at),
            LessonKind::Failed { .. } => {
                self.failed_at = Some(at);
                self.failures = self.failures.saturating_add(1);
            }
            // Not about the route: never handed to a route record.
            LessonKind::QuicWorked | LessonKind::QuicBroken => return,
        }
        self.touched = at;
    }

    fn fresh(&self, now: Instant, ttl: Duration) -> bool {
        now - self.touched <= ttl
    }
}

#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
struct FamilyRecord {
    rtt: Rtt,
    /// When the family last had a path failure (unreachable or timeout) with no success since.
    path_failure_at: Option<Instant>,
}

impl FamilyRecord {
    fn learn(&mut self, kind: LessonKind, at: Instant) {
        match kind {
            LessonKind::Connected { rtt } => {
                self.rtt.measured(rtt, at);
                self.path_failure_at = None;
            }
            LessonKind::Unfinished { elapsed } => self.rtt.at_least(elapsed, at),
            LessonKind::Failed { kind, phase } => {
                // A TLS step that times out says something about the server, not the path.
                if kind.is_path_failure() && phase == Phase::Tcp {
                    self.path_failure_at = Some(at);
                }
            }
            LessonKind::QuicWorked | LessonKind::QuicBroken => {}
        }
    }
}

/// Whether a lesson about `target` says something about its family's path. A loopback
/// destination never leaves the host (RFC 1122 §3.2.1.3, RFC 4291 §2.5.3): its RTT and its
/// failures describe a local server, and would make the family look faster or broken on
/// networks where it is not (a sidecar on 127.0.0.1 must not demote IPv6).
fn teaches_family(target: SocketAddr) -> bool {
    match target.ip() {
        IpAddr::V4(v4) => !v4.is_loopback(),
        IpAddr::V6(v6) => {
            !v6.is_loopback() && v6.to_ipv4_mapped().is_none_or(|v4| !v4.is_loopback())
        }
    }
}

/// Applies `lesson` to what the network knows (its target's family record, or its QUIC
/// record), unless the target says nothing about the network's paths ([`teaches_family`]).
fn learn_network(families: &mut [FamilyRecord; 2], quic: &mut Option<QuicRecord>, lesson: &Lesson) {
    if !teaches_family(lesson.target) {
        return;
    }
    if lesson.kind.is_about_quic() {
        *quic = QuicRecord::learn(*quic, lesson.kind, lesson.at);
    } else {
        families[slot(Family::of(lesson.target.ip()))].learn(lesson.kind, lesson.at);
    }
}

fn slot(f: Family) -> usize {
    match f {
        Family::V6 => 0,
        Family::V4 => 1,
    }
}

/// The most routes one view (one origin) holds; more are not learned locally.
const MAX_ROUTES_PER_ORIGIN: usize = 64;

#[derive(Clone, Debug)]
struct OriginMemory {
    routes: Vec<(SocketAddr, RouteRecord)>,
    touched: Instant,
    quic: Option<QuicRecord>,
    /// Its HTTP/3 alternatives from Alt-Svc (at most [`MAX_ALTERNATIVES_KEPT`]).
    alt_svc: Vec<AltRecord>,
}

impl OriginMemory {
    fn new(now: Instant) -> Self {
        Self {
            routes: Vec::new(),
            touched: now,
            quic: None,
            alt_svc: Vec::new(),
        }
    }

    /// How many of the network's `max_routes` this origin takes: one per route, one for its
    /// QUIC record, and one for its Alt-Svc alternatives.
    fn slots(&self) -> usize {
        self.routes.len() + usize::from(self.quic.is_some()) + usize::from(!self.alt_svc.is_empty())
    }

    /// Whether eviction keeps the origin at `now`: it was touched within the TTL, or its QUIC
    /// record is still alive, or an Alt-Svc alternative is still fresh.
    fn fresh(&self, now: Instant, ttl: Duration) -> bool {
        now - self.touched <= ttl
            || self.quic.is_some_and(|q| q.alive(now, ttl))
            || self.alt_svc.iter().any(|a| a.fresh(now))
    }

    /// Applies `lessons` to this origin's routes and QUIC record and to what the network
    /// knows (`families`, `quic`), keeping the network's count of slots.
    fn learn(
        &mut self,
        families: &mut [FamilyRecord; 2],
        quic: &mut Option<QuicRecord>,
        count: &mut usize,
        lessons: impl Iterator<Item = Lesson>,
    ) {
        let before = self.slots();
        for lesson in lessons {
            learn_network(families, quic, &lesson);
            self.touched = self.touched.max(lesson.at);
            if lesson.kind.is_about_quic() {
                self.quic = QuicRecord::learn(self.quic, lesson.kind, lesson.at);
                continue;
            }
            match self.routes.iter().position(|(t, _)| *t == lesson.target) {
                Some(i) => self.routes[i].1.learn(lesson.kind, lesson.at),
                None if self.routes.len() < MAX_ROUTES_PER_ORIGIN => {
                    let mut r = RouteRecord::default();
                    r.learn(lesson.kind, lesson.at);
                    self.routes.push((lesson.target, r));
                }
                None => {}
            }
        }
        *count = (*count + self.slots()).saturating_sub(before);
    }
}

#[derive(Clone, Debug)]
struct NetworkMemory {
    id: NetworkId,
    families: [FamilyRecord; 2],
    /// The network's broken-QUIC record, for origins with none of their own.
    quic: Option<QuicRecord>,
    origins: HashMap<OriginKey, OriginMemory, FxBuildHasher>,
    /// Slots taken ([`OriginMemory::slots`]): routes, and origins' QUIC records and Alt-Svc
    /// alternatives.
    routes: usize,
}

impl NetworkMemory {
    fn new(id: NetworkId) -> Self {
        Self {
            id,
            families: [FamilyRecord::default(); 2],
            quic: None,
            origins: HashMap::default(),
            routes: 0,
        }
    }

    /// Applies `lessons` about the origin `host`:`port`, making its entry if it is new (after
    /// eviction if the network is full): one lookup for a known origin, and a copy of the host
    /// only for a new one.
    fn learn_origin(
        &mut self,
        host: &Host,
        port: u16,
        lessons: impl Iterator<Item = Lesson>,
        now: Instant,
        config: RouteMemory,
    ) {
        if let Some(origin) = self.origins.get_mut(&(host, port) as &dyn OriginRef) {
            origin.learn(
                &mut self.families,
                &mut self.quic,
                &mut self.routes,
                lessons,
            );
            return;
        }
        if self.routes >= config.max_routes {
            self.evict(now, config);
        }
        let mut fresh = OriginMemory::new(now);
        fresh.learn(
            &mut self.families,
            &mut self.quic,
            &mut self.routes,
            lessons,
        );
        self.origins.insert(OriginKey::new(host, port), fresh);
    }

    /// Drops expired origins, then the least recently touched eighth while over `max_routes`.
    fn evict(&mut self, now: Instant, config: RouteMemory) {
        let ttl = config.ttl;
        self.origins.retain(|_, o| o.fresh(now, ttl));
        self.routes = self.origins.values().map(OriginMemory::slots).sum();
        while self.routes >= config.max_routes && !self.origins.is_empty() {
            // The `drop` least recently touched go: those before the cut, then as many at it.
            let mut ages: Vec<Instant> = self.origins.values().map(|o| o.touched).collect();
            ages.sort_unstable();
            let drop = (ages.len() / 8).max(1);
            let cut = ages[drop - 1];
            let mut at_cut = drop - ages.iter().take_while(|t| **t < cut).count();
            let routes = &mut self.routes;
            self.origins.retain(|_, o| {
                let goes = o.touched < cut || (o.touched == cut && at_cut > 0);
                if goes {
                    at_cut -= usize::from(o.touched == cut);
                    *routes -= o.slots();
                }
                !goes
            });
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Most recently used first; at most [`MAX_NETWORKS`].
    networks: Vec<NetworkMemory>,
}

/// How many networks' memories are kept (the current one and those set aside).
const MAX_NETWORKS: usize = 4;

impl Inner {
    fn network(&self, id: NetworkId) -> Option<&NetworkMemory> {
        self.networks.iter().find(|n| n.id == id)
    }

    /// The network's memory, moved to the front, created if new.
    fn network_mut(&mut self, id: NetworkId) -> &mut NetworkMemory {
        match self.networks.iter().position(|n| n.id == id) {
            Some(0) => {}
            Some(i) => {
                let n = self.networks.remove(i);
                self.networks.insert(0, n);
            }
            None => {
                self.networks.truncate(MAX_NETWORKS - 1);
                self.networks.insert(0, NetworkMemory::new(id));
            }
        }
        &mut self.networks[0]
    }
}

/// Memory of past routes, shared by all races of a client, kept per network and per origin.
/// Thread-safe; every method takes `now`. Races never call it: the driver takes a
/// [`MemoryView`] for each race and applies the race's [`Lesson`]s afterwards.
///
/// ```
/// use fastfallback_route::{Address, Lesson, LessonKind, NetworkId, RouteDatabase, RouteMemory};
/// use fastfallback_proto::{AttemptErrorKind, Instant, Phase};
///
/// let db = RouteDatabase::new(RouteMemory::default());
/// let home = NetworkId(1);
/// let origin = Address::parse("https://example.com").unwrap();
/// let target = "[2001:db8::a]:443".parse().unwrap();
/// let t0 = Instant::from_millis(0);
/// let kind = LessonKind::Failed { kind: AttemptErrorKind::Unreachable, phase: Phase::Tcp };
/// db.learn(home, &origin, [Lesson { target, at: t0, kind }]);
/// assert!(db.view(home, &origin, t0).is_postponed(target, t0));
/// // Another network sees none of it (HEv3 §5.3).
/// assert!(db.view(NetworkId(2), &origin, t0).is_empty());
/// ```
#[derive(Debug, Default)]
pub struct RouteDatabase {
    config: RouteMemory,
    inner: Mutex<Inner>,
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
        // Every update leaves `Inner` consistent between statements that could panic (there
        // are none that can on valid data), so a poisoned lock is still usable.
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// What the store knows about `origin` (its connect host and port) on `network`: the input
    /// of one race. Expired entries are left out.
    pub fn view(&self, network: NetworkId, origin: &Address, now: Instant) -> MemoryView {
        let (host, port) = origin.connect_host();
        if let Host::Ip(ip) = host {
            return self.literal_view(SocketAddr::new(*ip, port));
        }
        let mut view = MemoryView::empty(self.config);
        if !self.config.enabled {
            view.keeps_routes = false;
            return view;
        }
        let ttl = self.config.ttl;
        self.with(|inner| {
            let Some(net) = inner.network(network) else {
                return;
            };
            view.families = net.families;
            let origin = net.origins.get(&(host, port) as &dyn OriginRef);
            if let Some(o) = origin {
                view.routes
                    .extend(o.routes.iter().filter(|(_, r)| r.fresh(now, ttl)));
            }
            // The origin's own QUIC record, once it has one, outranks the network's.
            let quic = match origin {
                Some(OriginMemory { quic: Some(q), .. }) => Some(q),
                _ => net.quic.as_ref(),
            };
            view.quic_broken_until = quic.and_then(|q| q.broken_at(now));
        });
        view
    }

    /// What the store gives a race to the IP literal `target` ([`Self::view`] of such an
    /// origin): the same on every network and at every instant, so it needs neither.
    ///
    /// A literal has one route: nothing to order and no attempt after it to pace, so its
    /// race needs no history (it still learns, for the family records). A loopback literal
    /// neither reads history nor teaches any (its connects say nothing about the network):
    /// its race keeps no memory at all, and learns nothing it would throw away.
    pub fn literal_view(&self, target: SocketAddr) -> MemoryView {
        if !teaches_family(target) {
            return MemoryView::disabled();
        }
        let mut view = MemoryView::empty(self.config);
        view.keeps_routes = false;
        view
    }

    /// Applies a race's lessons for `origin` on `network`, under one lock. Returns whether
    /// anything was learned: an IP literal's lessons teach only the family records, and
    /// nothing (no lock taken) when the literal is a loopback address.
    pub fn learn(
        &self,
        network: NetworkId,
        origin: &Address,
        lessons: impl IntoIterator<Item = Lesson>,
    ) -> bool {
        if !self.config.enabled || self.config.max_routes == 0 {
            return false;
        }
        let mut lessons = lessons.into_iter().peekable();
        let Some(first) = lessons.peek() else {
            return false;
        };
        let now = first.at;
        let (host, port) = origin.connect_host();
        // An IP literal has one route (every lesson is about it), never reordered: only the
        // family records learn, and a loopback route teaches them nothing.
        if matches!(host, Host::Ip(_)) && !teaches_family(first.target) {
            return false;
        }
        let config = self.config;
        self.with(|inner| {
            let net = inner.network_mut(network);
            if matches!(host, Host::Ip(_)) {
                for lesson in lessons {
                    learn_network(&mut net.families, &mut net.quic, &lesson);
                }
                return;
            }
            net.learn_origin(host, port, lessons, now, config);
        });
        true
    }

    /// Number of routes remembered on `network`, with one for each origin's broken-QUIC
    /// record and one for each origin's Alt-Svc alternatives (expired ones included until
    /// evicted).
    pub fn len(&self, network: NetworkId) -> usize {
        self.with(|inner| inner.network(network).map_or(0, |n| n.routes))
    }

    /// Whether nothing at all is remembered, on any network.
    pub fn is_empty(&self) -> bool {
        self.with(|inner| {
            inner.networks.iter().all(|n| {
                n.routes == 0 && n.families == [FamilyRecord::default(); 2] && n.quic.is_none()
            })
        })
    }

    /// The networks remembered, most recently used first.
    pub fn networks(&self) -> Vec<NetworkId> {
        self.with(|inner| inner.networks.iter().map(|n| n.id).collect())
    }

    /// Forgets everything.
    pub fn clear(&self) {
        self.with(|inner| *inner = Inner::default());
    }

    /// Encodes the store for a file (the `persist` module): bounded, versioned, checksummed. `now` is
    /// the race clock and `wall_secs` the wall clock in seconds since the Unix epoch, both read
    /// by the caller.
    pub fn encode(&self, now: Instant, wall_secs: u64) -> Vec<u8> {
        self.with(|inner| persist::encode(inner, now, wall_secs))
    }

    /// Replaces the store's contents with a file written by [`Self::encode`], possibly by
    /// another process. Ages carry over through the wall clock; entries past the TTL, or older
    /// than the race clock's epoch, are dropped. On error the store is left as it was.
    pub fn decode_into(
        &self,
        bytes: &[u8],
        now: Instant,
        wall_secs: u64,
    ) -> Result<(), PersistError> {
        let inner = persist::decode(bytes, now, wall_secs, self.config)?;
        self.with(|i| *i = inner);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
