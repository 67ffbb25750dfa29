//! [`FastFallbackExchangeFinder`]: the race as a sans-IO state machine.
//!
//! ```text
//!   [Waiting] ── handle_release: the connect it followed ended ──▶ [Resolving] or [Racing]
//!      (single flight)                      a pooled connection ──▶ [Won]
//!
//!   [Resolving] ── move-on rule (HEv3 §4.2) ──▶ [Racing] ◀──── owner's TLS fails ─────┐
//!                                                │  │                                  │
//!                                                │  └── TCP wins (WinAt::Tcp) ──▶ [TlsOwner]
//!                                                │                                     │
//!               first success, or a pooled connection (from any running phase) ────────┤
//!                                                ▼                                     ▼
//!                                              [Won] ── DNS tail (≤ 1 s) ──▶ queries dropped
//!
//!   [Failed]    ◀── nothing in flight, nothing pending, nothing untried; or the deadline
//!   [Abandoned] ◀── the caller gave up (from any running phase)
//! ```
//!
//! Attempts have their own states ([`AttemptState`]); every attempt ends exactly once, and
//! events for an attempt that already ended are ignored, so a stale result can never be
//! mistaken for a fresh one (OkHttp's stale-queue bug, its spec §2.8).
//!
//! ## Launch rules
//!
//! - The first attempt starts as soon as DNS allows (HEv3 §4.2).
//! - Each start arms the next-attempt timer at `start + CAD` (HEv3 §6), where CAD comes from
//!   [`FallbackPolicy::attempt_delay_for`] with the route's (or the family's) RTT history. The
//!   10 ms floor of RFC 8305 §5 bounds the CAD, so these timer-driven starts are at least 10 ms
//!   apart.
//! - When the most recently started attempt has ended (it failed, timed out or asked for a
//!   follow-up), or nothing is in flight, the next one starts at that same instant (reference
//!   profile P4, R-30: what Go, curl, Python, Chromium and the Mozilla crate do). Such a start
//!   is serial, so it needs no floor. [`StartFloor::EveryStart`] keeps the literal reading
//!   instead: 10 ms between any two starts. The failure of an older attempt does not advance.
//! - In TLS mode, a TCP connect of the timer's owner moves the timer to
//!   `max(deadline, t_tcp + CAD)` (HEv3 §6.1, profile P6).
//! - When the list runs out the timer is disarmed but its deadline is kept for endpoints that
//!   arrive later (profile P7), and read by [`FastFallbackExchangeFinder::timer`].
//! - Queued plans (follow-ups at the front, cancelled losers' retries at the back) go before new
//!   routes (OkHttp R7).
//!
//! ## The driver contract
//!
//! The methods come in the four kinds quinn-proto names:
//! - inputs, `handle_*(.., now)`: DNS answers ([`FastFallbackExchangeFinder::handle_dns`]),
//!   attempt progress, pooled connections, and expired timers
//!   ([`FastFallbackExchangeFinder::handle_timeout`]);
//! - mutators: [`FastFallbackExchangeFinder::abandon`],
//!   [`FastFallbackExchangeFinder::next_exchange`];
//! - outputs, `poll_*`: [`FastFallbackExchangeFinder::poll_output`] (what to do now: an
//!   attempt's TLS step may start once `Output::StartTls` says so, or `Output::ResumeAttempt`
//!   for a plan that holds TLS),
//!   [`FastFallbackExchangeFinder::poll_timeout`] (when to call `handle_timeout`), and
//!   [`FastFallbackExchangeFinder::drain_lessons`] (what route memory should learn);
//! - getters.
//!
//! `now` never goes backwards across calls. After handing in everything that happened at one
//! instant (and calling `handle_timeout` if `poll_timeout` has passed), drain `poll_output`
//! until `None`, then sleep until `poll_timeout` or the next event. The race decides only when
//! it is polled, so inputs of the same instant can be handed in in any order.
//!
//! The race calls out to nothing: sources and route memory come in as data, lessons go out as
//! data, and every random choice comes from [`RaceInput::seed`]. The same inputs at the same
//! times give the same outputs.

use smallvec::SmallVec;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::time::Duration;

use fastfallback_proto::{
    AlpnOffer, AttemptError, AttemptErrorKind, AttemptEvent, AttemptFailure, AttemptId,
    CancelReason, DnsAnswer, Family, Instant, Output, Phase, PooledId, Query, QueryKind, RaceError,
    RaceErrorKind, Winner,
};
use fastfallback_route::order::{FamilyPreference, OrderContext, Orderable, order};
use fastfallback_route::{
    Address, Connectivity, Host, Lesson, LessonKind, MemoryView, Resolution, Route, Scheme, Source,
    SourceOf, Zone,
};

mod timers;

use crate::answers::Answers;
use crate::attempt::{AttemptRecord, AttemptState};
use crate::policy::HARD_MIN_ATTEMPT_DELAY;
use crate::timer::{Timer, TimerTable};
use crate::{ConnectPlan, FallbackPolicy, StartFloor, TlsStep, WinAt};

/// What a race takes in besides the origin and the policy: all of it plain data.
#[derive(Clone, Debug)]
pub struct RaceInput {
    /// Which families the host can use, and its NAT64 prefix.
    pub connectivity: Connectivity,
    /// What route memory knows about this origin on this network
    /// ([`fastfallback_route::RouteDatabase::view`]).
    pub memory: MemoryView,
    /// Seeds every random choice of the race (today: whether it ignores history, see
    /// [`fastfallback_route::RouteMemory::explore_one_in`]).
    pub seed: u64,
    /// Whether the race starts [`RacePhase::Waiting`] (it follows another call's connect).
    pub waiting: bool,
}

impl RaceInput {
    /// Input for a host with `connectivity`, no route memory, seed 0.
    pub fn new(connectivity: Connectivity) -> Self {
        Self {
            connectivity,
            memory: MemoryView::disabled(),
            seed: 0,
            waiting: false,
        }
    }

    /// Starting [`RacePhase::Waiting`], for a call that follows another's connect.
    #[must_use]
    pub fn waiting(mut self, waiting: bool) -> Self {
        self.waiting = waiting;
        self
    }

    /// With route memory.
    #[must_use]
    pub fn memory(mut self, memory: MemoryView) -> Self {
        self.memory = memory;
        self
    }

    /// With a seed.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// The opening move of a race that has only one move to make before its first timer: start
/// one attempt, at its start ([`FastFallbackExchangeFinder::lone_opening`]).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LoneOpening {
    /// The attempt's id: the one the race gives its first attempt.
    pub id: AttemptId,
    /// Where and how it connects: plain TCP to the literal, directly.
    pub plan: ConnectPlan,
}

/// Where the race is (see the module's state diagram).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum RacePhase {
    /// Waiting for another call's connect to the same origin before doing anything (single
    /// flight): a pooled connection may end the race ([`FastFallbackExchangeFinder::handle_pooled`]),
    /// or [`FastFallbackExchangeFinder::handle_release`] lets it go on. The connect deadline runs.
    Waiting,
    /// Waiting for DNS to allow the first attempt (HEv3 §4.2).
    Resolving,
    /// Attempts may start.
    Racing,
    /// One attempt won at TCP and does TLS alone; nothing else starts ([`WinAt::Tcp`]).
    TlsOwner(AttemptId),
    /// Won. Queries still pending are kept for the DNS tail.
    Won {
        /// What won.
        winner: Winner,
        /// When.
        at: Instant,
    },
    /// Lost: every cause went out in [`Output::Failed`].
    Failed,
    /// The caller gave up.
    Abandoned,
}

impl RacePhase {
    fn is_running(self) -> bool {
        matches!(
            self,
            Self::Waiting | Self::Resolving | Self::Racing | Self::TlsOwner(_)
        )
    }
}

#[derive(Clone, Copy, Debug)]
struct Endpoint {
    logical: IpAddr,
    target: SocketAddr,
    source: Option<Source>,
    tried: bool,
    /// The service priority group ([`fastfallback_route::Candidate::group`]).
    group: u16,
    /// Whether it is a fallback without SVCB ([`fastfallback_route::Candidate::without_svcb`]).
    without_svcb: bool,
    /// Which TLS step its attempts take: 0 the race's own, `n` the `n`-th of
    /// `FastFallbackExchangeFinder::ech_steps` (its service's ECH configuration).
    tls_variant: u16,
    /// Whether the current answers still list it (an attempted endpoint stays in the list
    /// after its answer is withdrawn, HEv3 §7, but is no longer listed).
    listed: bool,
}

impl Orderable for Endpoint {
    fn logical(&self) -> IpAddr {
        self.logical
    }
    fn target(&self) -> SocketAddr {
        self.target
    }
    fn source(&self) -> Option<Source> {
        self.source
    }
}

/// The pacing of starts: the latest start and the Connection Attempt Delay deadline after it
/// (kept after the list runs out, profile P7).
#[derive(Clone, Copy, Debug, Default)]
struct Pacing {
    last_start: Option<Instant>,
    latest: Option<AttemptId>,
    next_at: Option<Instant>,
}

/// The race for one origin, as a deterministic state machine (see the module docs for the
/// rules, the state diagram and the driver contract).
///
/// ```
/// use fastfallback_plan::{FastFallbackExchangeFinder, FallbackPolicy, RaceInput};
/// use fastfallback_proto::{AttemptEvent, DnsAnswer, Instant, Output, Query, QueryKind, Winner};
/// use fastfallback_route::{Address, Connectivity};
///
/// let addr = Address::parse("tcp://example.com:80").unwrap();
/// let t0 = Instant::from_millis(0);
/// let input = RaceInput::new(Connectivity::DUAL_STACK);
/// let mut race = FastFallbackExchangeFinder::new(addr, FallbackPolicy::default(), input, t0);
/// let aaaa = Query::origin(QueryKind::Aaaa);
/// assert_eq!(race.poll_output(t0), Some(Output::StartQuery(aaaa.clone())));
/// assert_eq!(race.poll_output(t0), Some(Output::StartQuery(Query::origin(QueryKind::A))));
/// assert_eq!(race.poll_output(t0), None);
///
/// let t20 = Instant::from_millis(20);
/// let answer = DnsAnswer::Addresses(vec!["2001:db8::a".parse().unwrap()]);
/// race.handle_dns(aaaa, &answer, Vec::new(), t20);
/// let Some(Output::StartAttempt { id, plan }) = race.poll_output(t20) else { panic!() };
/// assert_eq!(plan.route.target.to_string(), "[2001:db8::a]:80");
///
/// let t40 = Instant::from_millis(40);
/// race.handle_attempt(id, AttemptEvent::Connected(None), t40);
/// assert_eq!(race.poll_output(t40), Some(Output::Done(Winner::Attempt(id))));
/// ```
///
/// The race is [`Clone`]: a copy is a race of its own, at the same point, that takes inputs
/// and gives outputs without touching the original (to look ahead without replaying every
/// input). The policy and TLS steps are shared (`Arc`); the rest is copied.
#[derive(Clone)]
pub struct FastFallbackExchangeFinder {
    /// Shared by every race of a client: cloning an `Arc` costs less than copying the policy.
    policy: Arc<FallbackPolicy>,
    address: Address,
    tls: Option<Arc<TlsStep>>,
    /// The race's TLS step with each ECH configuration its services carry. A boxed slice,
    /// grown on the rare answer with a new configuration: 8 bytes less than a `Vec` keeps
    /// the race at 1 000 bytes, in glibc's small-chunk range (see `boxed`).
    ech_steps: Box<[Arc<TlsStep>]>,
    connectivity: Connectivity,
    memory: MemoryView,
    history_ignored: bool,
    /// Most races learn one lesson (the winner's RTT); a loser's spills to the heap.
    lessons: SmallVec<[Lesson; 1]>,
    /// What DNS told the race ([`Answers`]: nothing at all for most IP literals).
    resolution: Answers,
    /// The queries sent at the start, in order (at most HTTPS, AAAA and A).
    queries: [Option<QueryKind>; 3],
    /// Whether the race decided to send `queries` (or gave them up unsent).
    queries_sent: bool,
    /// How many of `queries` went out as outputs (`u8::MAX`: given up unsent). They are
    /// polled straight from the array, ahead of the queue, and take no room in it.
    queries_out: u8,
    sources: Vec<SourceOf>,
    endpoints: SmallVec<[Endpoint; 2]>,
    order_dirty: bool,
    attempts: Attempts,
    /// Plans to run before the next endpoint (OkHttp's deferred plans), as a stack: the last
    /// runs first. A follow-up goes on top, a lost attempt's retry underneath. A `Vec`: it is
    /// almost always empty, and an empty `Vec` is smaller and cheaper to drop than a
    /// `VecDeque`.
    deferred: Vec<ConnectPlan>,
    out: OutQueue,
    exchange: u32,
    started: Instant,
    phase: RacePhase,
    pacing: Pacing,
    timers: TimerTable,
    /// Set by every input and fired timer; the race decides only when it is set.
    needs_decision: bool,
    last_now: Instant,
}

/// Every attempt of a race, in start order (a slice; the first is kept inline, as most races
/// need no second).
#[derive(Clone, Debug, Default)]
pub struct Attempts(SmallVec<[AttemptRecord; 1]>);

impl std::ops::Deref for Attempts {
    type Target = [AttemptRecord];
    fn deref(&self) -> &[AttemptRecord] {
        &self.0
    }
}

impl std::ops::DerefMut for Attempts {
    fn deref_mut(&mut self) -> &mut [AttemptRecord] {
        &mut self.0
    }
}

/// The race's outputs waiting to be polled, first in first out. Most turns produce one: it
/// waits in `first`, and only a turn that produces more uses `rest` (allocated then). `rest`
/// holds a handful at most, so it is a `Vec` taken from the front, 8 bytes smaller than a
/// `VecDeque`.
#[derive(Clone, Debug, Default)]
struct OutQueue {
    first: Option<Output<ConnectPlan>>,
    rest: Vec<Output<ConnectPlan>>,
}

impl OutQueue {
    fn push_back(&mut self, out: Output<ConnectPlan>) {
        // `first` is the head of the queue: it may take a new output only when it is empty.
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(out);
        } else {
            self.rest.push(out);
        }
    }

    fn pop_front(&mut self) -> Option<Output<ConnectPlan>> {
        self.first
            .take()
            .or_else(|| (!self.rest.is_empty()).then(|| self.rest.remove(0)))
    }

    fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }
}

/// The source the driver found for `dst`. Loopback destinations use themselves (RFC 6724 §6
/// pairs them with loopback sources); a destination the driver said nothing about is treated
/// as having a matching source, so it keeps its DNS position.
fn source_of(sources: &[SourceOf], dst: IpAddr) -> Option<Source> {
    if let Some(s) = sources.iter().find(|s| s.dst == dst) {
        return s.source;
    }
    let len = if dst.is_ipv4() { 32 } else { 128 };
    Some(Source::new(dst, if dst.is_loopback() { len } else { 0 }))
}

impl FastFallbackExchangeFinder {
    /// A race for `address`, starting at `now`. The policy may be shared with other races
    /// (`Arc<FallbackPolicy>`) or given by value.
    pub fn new(
        address: Address,
        policy: impl Into<Arc<FallbackPolicy>>,
        input: RaceInput,
        now: Instant,
    ) -> Self {
        *Self::boxed(address, policy.into(), input, now)
    }

    /// The opening of a race to `address` that has one move to make until its first timer,
    /// if it is such a race: it starts one attempt at its start (the [`LoneOpening`]'s), and
    /// then waits for nothing but that attempt and its own timers. When the attempt connects,
    /// the race has won, in that instant, and has learned nothing.
    ///
    /// That is a race to an IP literal [`Resolution::takes_literal_as_is`] on this
    /// connectivity, of a family the policy allows, without a zone, a proxy or TLS, with no
    /// route memory (a loopback literal's race keeps none), on a host without a NAT64 prefix,
    /// not waiting for another call's connect, and with timeouts that leave the attempt time
    /// to run. Every other race gives `None`.
    ///
    /// A driver may make such an opening itself and build the race only when something else
    /// happens (the attempt fails, or the race waits long enough to need its timers) or when
    /// someone asks what happened: [`Self::after_lone_opening`] builds it exactly as
    /// [`Self::boxed`] and a first [`Self::poll_output`] would have left it. A connect to a
    /// loopback literal that succeeds at once then never builds the race at all. A test
    /// checks the promise against the race itself, over random inputs.
    pub fn lone_opening(
        address: &Address,
        policy: &FallbackPolicy,
        input: &RaceInput,
    ) -> Option<LoneOpening> {
        let (Host::Ip(ip), port) = address.connect_host() else {
            return None;
        };
        let simple = !input.waiting
            && !input.memory.is_enabled()
            && input.connectivity.nat64.is_none()
            && address.zone().is_none()
            && address.proxy().is_none()
            && !address.is_tls()
            && !policy.connect_timeout.is_zero()
            && !policy.attempt_timeout.is_zero();
        if !simple {
            return None;
        }
        let ip = *ip;
        // The connectivity as the race sees it ([`Self::boxed`]).
        let mut conn = input.connectivity;
        conn.v6 &= policy.family.allows(Family::V6);
        conn.v4 &= policy.family.allows(Family::V4);
        let as_is = policy.family.allows(Family::of(ip))
            && Resolution::takes_literal_as_is(ip, conn)
            && conn.connect_ip(ip) == ip;
        as_is.then(|| LoneOpening {
            id: AttemptId::FIRST,
            plan: ConnectPlan::new(Route::direct(SocketAddr::new(ip, port)), None),
        })
    }

    /// The race of a [`Self::lone_opening`] made at `now`, as it stands right after it: built
    /// with [`Self::boxed`], and its first output (that opening, which the driver has acted
    /// on already) taken. `input` is the one `lone_opening` was given.
    pub fn after_lone_opening(
        address: Address,
        policy: Arc<FallbackPolicy>,
        input: RaceInput,
        now: Instant,
    ) -> Box<Self> {
        let mut race = Self::boxed(address, policy, input, now);
        let opening = race.poll_output(now);
        debug_assert!(
            matches!(opening, Some(Output::StartAttempt { id, .. }) if id == AttemptId::FIRST),
            "not a lone opening: {opening:?}"
        );
        race
    }

    /// [`Self::new`], built directly on the heap: a driver that keeps the race in a `Box`
    /// saves copying it there. The race is kept at 1 000 bytes or less (a test checks it),
    /// the most glibc's allocator serves from its small bins.
    pub fn boxed(
        address: Address,
        policy: Arc<FallbackPolicy>,
        input: RaceInput,
        now: Instant,
    ) -> Box<Self> {
        let RaceInput {
            mut connectivity,
            mut memory,
            seed,
            waiting,
        } = input;
        connectivity.v6 &= policy.family.allows(Family::V6);
        connectivity.v4 &= policy.family.allows(Family::V4);
        let explore = policy.route_memory.explore_one_in;
        let history_ignored = explore > 0
            && !memory.is_empty()
            && fastfallback_route::splitmix64(seed).is_multiple_of(u64::from(explore));
        if history_ignored {
            memory.forget();
        }
        let (host, _) = address.connect_host();
        let (resolution, queries) = match host {
            Host::Ip(ip) => match address.zone() {
                None => (Answers::literal(*ip, connectivity), [None; 3]),
                Some(zone) => {
                    let scoped = matches!(zone, Zone::Index(_));
                    // Boxed where it is built: a resolution is too large to move cheaply.
                    let mut r = Box::new(Resolution::fixed(&[*ip], scoped, connectivity));
                    if let Zone::Name(n) = zone {
                        r.note_skipped(
                            ip.to_string(),
                            format!("zone {n:?} was not turned into an interface index"),
                        );
                    }
                    (Answers::Resolved(r), [None; 3])
                }
            },
            Host::Name(_) if host.is_localhost() => {
                // RFC 6761 §6.3: localhost names are the loopback addresses, never DNS.
                let loopback = [
                    IpAddr::V6(Ipv6Addr::LOCALHOST),
                    IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                ];
                let r = Box::new(Resolution::fixed(&loopback, false, connectivity));
                (Answers::Resolved(r), [None; 3])
            }
            Host::Name(_) => {
                let https = policy.query_https
                    && address.scheme() != Scheme::Tcp
                    && address.proxy().is_none();
                let q = connectivity.queries(https);
                let preferred = match policy.family {
                    FamilyPreference::V6First | FamilyPreference::V6Only => Family::V6,
                    FamilyPreference::V4First | FamilyPreference::V4Only => Family::V4,
                    FamilyPreference::Auto => connectivity.preferred_family(),
                };
                let mut r = Resolution::new(
                    &q,
                    connectivity,
                    preferred,
                    policy.resolution_delay,
                    policy.answer_limits,
                )
                .offering(policy.alpn)
                .seeded(seed)
                .ech_capable(policy.ech && address.is_tls());
                if let (true, Host::Name(name)) = (https, host) {
                    r = r.named(name);
                }
                let r = Box::new(r);
                let mut queries = [None; 3];
                for (slot, kind) in queries.iter_mut().zip(q) {
                    *slot = Some(kind);
                }
                (Answers::Resolved(r), queries)
            }
        };
        let phase = if waiting {
            RacePhase::Waiting
        } else if resolution.moved_on() {
            RacePhase::Racing
        } else {
            RacePhase::Resolving
        };
        let mut timers = TimerTable::default();
        timers.set(Timer::Deadline, Some(now + policy.connect_timeout));
        let tls = Self::tls_step(&address, policy.alpn);
        // Written straight into its allocation: the race is too large to build and then copy.
        let mut race = Box::write(
            Box::new_uninit(),
            Self {
                policy,
                address,
                tls,
                ech_steps: Box::default(),
                connectivity,
                memory,
                history_ignored,
                lessons: SmallVec::new(),
                resolution,
                queries,
                queries_sent: false,
                queries_out: 0,
                sources: Vec::new(),
                endpoints: SmallVec::new(),
                order_dirty: false,
                attempts: Attempts(SmallVec::new()),
                deferred: Vec::new(),
                out: OutQueue::default(),
                exchange: 0,
                started: now,
                phase,
                pacing: Pacing::default(),
                timers,
                needs_decision: true,
                last_now: now,
            },
        );
        race.sync_endpoints();
        race
    }

    // ---- inputs ----

    /// Takes in one DNS answer to `query` (a [`QueryKind`] alone means the origin's name),
    /// with the source address of each of its destinations ([`Connectivity::destinations`]),
    /// found by the driver (taken by value: the race's first list of sources is the driver's,
    /// not a copy). A destination without an entry is sorted as if the host had a matching
    /// source for it. An answer may call for follow-up queries (an alias target, a
    /// service's TargetName, RFC 9460 §3), which come out as [`Output::StartQuery`]. Answers
    /// after a win are taken for the DNS tail and start nothing (HEv3 §6).
    pub fn handle_dns(
        &mut self,
        query: impl Into<Query>,
        answer: &DnsAnswer,
        sources: Vec<SourceOf>,
        now: Instant,
    ) {
        let query = query.into();
        let now = self.clock(now);
        self.needs_decision = true;
        match self.phase {
            RacePhase::Waiting
            | RacePhase::Resolving
            | RacePhase::Racing
            | RacePhase::TlsOwner(_) => {
                if self.sources.is_empty() {
                    self.sources = sources;
                } else {
                    for s in sources {
                        match self.sources.iter_mut().find(|k| k.dst == s.dst) {
                            Some(known) => *known = s,
                            None => self.sources.push(s),
                        }
                    }
                }
                self.resolution.handle_answer(&query, answer, now);
                if self.policy.protected_dns
                    && query.kind == QueryKind::Https
                    && matches!(answer, DnsAnswer::Error(_))
                {
                    // HEv3 §6.3 R-38: over protected DNS an SVCB failure may be an attack;
                    // abandon rather than connect without the records.
                    self.fail(RaceErrorKind::SvcbResolutionFailed, now);
                    self.rearm();
                    return;
                }
                if let Answers::Resolved(r) = &mut self.resolution {
                    for q in r.take_queries() {
                        self.out.push_back(Output::StartQuery(q));
                    }
                }
                self.sync_endpoints();
                self.try_move_on(now);
                self.resume_held(now);
            }
            // The DNS tail: the answer is taken (the query is no longer pending) and starts
            // nothing, follow-up queries included. Caching it is the resolver's job.
            RacePhase::Won { .. } => {
                self.resolution.handle_answer(&query, answer, now);
                self.resolution.abandon_unsent();
            }
            RacePhase::Failed | RacePhase::Abandoned => {}
        }
        self.rearm();
    }

    /// Takes in progress of one attempt. Events for unknown or finished attempts are ignored.
    pub fn handle_attempt(
        &mut self,
        id: AttemptId,
        event: AttemptEvent<ConnectPlan>,
        now: Instant,
    ) {
        let now = self.clock(now);
        let Some(i) = self.live_index(id) else {
            return;
        };
        self.needs_decision = true;
        match event {
            AttemptEvent::TcpConnected => self.on_tcp_connected(i, now),
            AttemptEvent::TunnelOpen => self.on_tunnel_open(i),
            AttemptEvent::Connected(alpn) => {
                if self.attempts[i].tcp_connected.is_none() {
                    self.note_tcp(i, now);
                }
                self.attempts[i].alpn = alpn;
                self.win(Winner::Attempt(id), Some(i), now);
            }
            AttemptEvent::Failed { error, follow_up } => {
                let target = self.attempts[i].plan.route.target;
                self.learn(
                    target,
                    now,
                    LessonKind::Failed {
                        kind: error.kind,
                        phase: error.phase,
                    },
                );
                self.end(i, AttemptState::Failed(error), now);
                if let Some(plan) = follow_up {
                    self.deferred.push(plan);
                }
            }
            AttemptEvent::FollowUp(plan) => {
                self.end(i, AttemptState::FollowedUp, now);
                self.deferred.push(plan);
            }
        }
        self.rearm();
    }

    /// Offers a pooled connection that became usable mid-race (for example another call's new
    /// HTTP/2 connection). It wins at once and every attempt in flight is cancelled. Returns
    /// whether it was taken: `false` once the race has ended.
    pub fn handle_pooled(&mut self, pooled: PooledId, now: Instant) -> bool {
        let now = self.clock(now);
        if !self.phase.is_running() {
            return false;
        }
        self.needs_decision = true;
        self.win(Winner::Pooled(pooled), None, now);
        self.rearm();
        true
    }

    /// Lets a [`RacePhase::Waiting`] race go on: the connect it followed ended without a
    /// connection it can share. `news` is what that connect taught route memory (for example
    /// the route that just won on HTTP/1), applied to this race's view first, so it orders its
    /// attempts with it (news from a concurrent race comes in as an explicit input). Does
    /// nothing in any other phase.
    pub fn handle_release(&mut self, news: &[Lesson], now: Instant) {
        let now = self.clock(now);
        if !matches!(self.phase, RacePhase::Waiting) {
            return;
        }
        for lesson in news {
            self.memory.learn(lesson);
        }
        self.needs_decision = true;
        self.order_dirty = true;
        self.phase = if self.resolution.moved_on() {
            RacePhase::Racing
        } else {
            RacePhase::Resolving
        };
        self.try_move_on(now);
        self.rearm();
    }

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

    // ---- mutators ----

    /// The caller gave up: every attempt in flight is cancelled, pending queries are dropped
    /// and nothing more starts. What the race learned so far stays in
    /// [`Self::drain_lessons`].
    pub fn abandon(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.phase.is_running() {
            self.cancel_in_flight(CancelReason::Abandoned, None, now);
            self.phase = RacePhase::Abandoned;
        }
        self.cancel_queries();
        self.timers.stop_all();
    }

    /// Starts the next exchange on the same finder after a win, reusing queued plans first
    /// (OkHttp's `find()` called again: FF-7, FF-8). The deadline restarts at `now`.
    pub fn next_exchange(&mut self, now: Instant) {
        let now = self.clock(now);
        if let RacePhase::Won { .. } = self.phase {
            self.needs_decision = true;
            self.phase = RacePhase::Racing;
            self.exchange += 1;
            self.started = now;
            self.timers.set(Timer::DnsTail, None);
            self.timers
                .set(Timer::Deadline, Some(now + self.policy.connect_timeout));
        }
        self.rearm();
    }

    // ---- outputs ----

    /// The next thing for the driver to do at `now`, if any. The race decides what to do only
    /// after an input or a fired timer, so calling this again without either costs nothing.
    pub fn poll_output(&mut self, now: Instant) -> Option<Output<ConnectPlan>> {
        let now = self.clock(now);
        if let Some(q) = self.next_initial_query() {
            return Some(Output::StartQuery(Query::origin(q)));
        }
        if self.out.is_empty() && self.needs_decision {
            self.needs_decision = false;
            self.decide(now);
            self.rearm();
            if let Some(q) = self.next_initial_query() {
                return Some(Output::StartQuery(Query::origin(q)));
            }
        }
        self.out.pop_front()
    }

    /// The next of the queries sent at the start that has not gone out yet.
    fn next_initial_query(&mut self) -> Option<QueryKind> {
        if !self.queries_sent {
            return None;
        }
        while let Some(slot) = self.queries.get(usize::from(self.queries_out)) {
            self.queries_out += 1;
            if let Some(q) = *slot {
                return Some(q);
            }
        }
        None
    }

    /// When [`Self::handle_timeout`] should be called next, even if nothing else happens: the
    /// earliest armed [`Timer`]. `None` when only outside events can move the race.
    /// [`Self::timer`] tells the kinds apart.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Takes what the race learned since the last call, in the order it learned it: the
    /// driver applies these to the shared [`fastfallback_route::RouteDatabase`].
    pub fn drain_lessons(&mut self) -> impl ExactSizeIterator<Item = Lesson> + '_ {
        self.lessons.drain(..)
    }

    /// Whether the race learned anything [`Self::drain_lessons`] has not taken yet. Cheaper
    /// than draining nothing: a loopback literal's race never learns.
    pub fn has_lessons(&self) -> bool {
        !self.lessons.is_empty()
    }

    /// [`Self::drain_lessons`], with the origin they are about (the key to learn them under).
    pub fn take_lessons(&mut self) -> (&Address, impl ExactSizeIterator<Item = Lesson> + '_) {
        (&self.address, self.lessons.drain(..))
    }

    // ---- getters ----

    /// Where the race is.
    pub fn phase(&self) -> RacePhase {
        self.phase
    }

    /// Whether the race has ended (won, failed or abandoned).
    pub fn is_finished(&self) -> bool {
        !self.phase.is_running()
    }

    /// Whether this race ignored route memory, as one race in
    /// [`fastfallback_route::RouteMemory::explore_one_in`] does.
    pub fn history_ignored(&self) -> bool {
        self.history_ignored
    }

    /// Every attempt so far, in start order.
    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.attempts
    }

    /// One attempt's record.
    pub fn attempt(&self, id: AttemptId) -> Option<&AttemptRecord> {
        self.attempts.get(Self::index_of(id))
    }

    /// The origin and every attempt, in start order, taking the race apart without copying
    /// (for a report kept after the race).
    pub fn into_parts(self) -> (Address, Attempts) {
        (self.address, self.attempts)
    }

    /// Attempts in flight now.
    pub fn in_flight(&self) -> usize {
        self.attempts.iter().filter(|a| a.in_flight()).count()
    }

    /// The current endpoint order, attempted ones included (for reports and tests).
    pub fn endpoint_order(&self) -> Vec<SocketAddr> {
        self.endpoints.iter().map(|e| e.target).collect()
    }

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

    /// How many queries the race sends at its start (follow-ups not counted), so that a
    /// driver can size its bookkeeping once.
    pub fn initial_queries(&self) -> usize {
        self.queries.iter().flatten().count()
    }

    /// The queries not yet answered.
    pub fn pending_queries(&self) -> Vec<Query> {
        self.resolution.pending_queries()
    }

    /// The origin.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// When the current exchange started: the race's start, or the last
    /// [`Self::next_exchange`]. Reports measure their times from here.
    pub fn started(&self) -> Instant {
        self.started
    }

    // ---- internals ----

    fn clock(&mut self, now: Instant) -> Instant {
        debug_assert!(
            now >= self.last_now,
            "time went backwards: {now} < {}",
            self.last_now
        );
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    fn index_of(id: AttemptId) -> usize {
        // Ids are handed out from AttemptId::FIRST, one per attempt, in order.
        id.get() as usize - 1
    }

    fn live_index(&self, id: AttemptId) -> Option<usize> {
        let i = Self::index_of(id);
        self.attempts.get(i).filter(|a| a.in_flight()).map(|_| i)
    }

    fn latest_ended(&self) -> bool {
        self.pacing
            .latest
            .and_then(|id| self.attempt(id))
            .is_some_and(|a| !a.in_flight())
    }

    fn learn(&mut self, target: SocketAddr, at: Instant, kind: LessonKind) {
        if !self.memory.is_enabled() {
            return;
        }
        let lesson = Lesson { target, at, kind };
        self.memory.learn(&lesson);
        self.lessons.push(lesson);
    }

    fn try_move_on(&mut self, now: Instant) {
        if matches!(self.phase, RacePhase::Resolving) && self.resolution.poll(now) {
            self.phase = RacePhase::Racing;
        }
    }

    /// Re-derives the timers that follow the race's state.
    fn rearm(&mut self) {
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
        let attempt_timeout = self
            .attempts
            .iter()
            .filter(|a| a.in_flight())
            .map(|a| a.timeout_at)
            .min();
        self.timers.set(Timer::AttemptTimeout, attempt_timeout);
        let rd = match self.phase {
            RacePhase::Resolving => self.resolution.deadline(),
            _ => None,
        };
        self.timers.set(Timer::ResolutionDelay, rd);
        // The HTTPS wait: `https_wait` after the first positive answer (never before the
        // Resolution Delay ends), while an ECH-capable race's HTTPS answer is pending.
        let wait = self.policy.https_wait.max(self.policy.resolution_delay);
        let https_wait = self
            .resolution
            .first_positive_at()
            .filter(|_| self.resolution.holds_tls() && !self.policy.protected_dns)
            .map(|t| t + wait);
        self.timers.set(Timer::HttpsWait, https_wait);
        let next = (matches!(self.phase, RacePhase::Racing) && self.has_candidate())
            .then(|| self.launch_gate());
        self.timers.set(Timer::NextAttempt, next);
        // A running race has not won, so it has no DNS tail yet.
        self.timers.set(Timer::DnsTail, None);
    }

    /// Reconciles the endpoint list with the current DNS answers: new addresses are added,
    /// untried ones that disappeared are removed, attempted ones stay (HEv3 §7).
    fn sync_endpoints(&mut self) {
        let origin_port = self.address.connect_host().1;
        let mut disallowed = SmallVec::<[IpAddr; 0]>::new();
        let scope = self.address.scope_id().unwrap_or(0);
        let (policy, connectivity) = (&self.policy, &self.connectivity);
        let (tls, ech_steps) = (&self.tls, &mut self.ech_steps);
        let (endpoints, sources) = (&mut self.endpoints, &self.sources);
        // The first sync (every race's, and a literal's only one) has nothing to reconcile.
        let first = endpoints.is_empty();
        for e in endpoints.iter_mut() {
            e.listed = false;
        }
        let mut changed = false;
        self.resolution.for_each_candidate(|c| {
            if !policy.family.allows(Family::of(c.ip)) {
                if !disallowed.contains(&c.ip) {
                    disallowed.push(c.ip);
                }
                return;
            }
            let port = c.port.unwrap_or(origin_port);
            let target = match connectivity.connect_ip(c.ip) {
                IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope)),
                v4 => SocketAddr::new(v4, port),
            };
            let variant = match (tls, c.ech) {
                (Some(base), Some(ech)) => {
                    let found = ech_steps
                        .iter()
                        .position(|s| s.ech.as_deref() == Some(&**ech));
                    let i = found.unwrap_or_else(|| {
                        let mut grown = std::mem::take(ech_steps).into_vec();
                        grown.push(Arc::new(TlsStep {
                            ech: Some(Arc::clone(ech)),
                            ..(**base).clone()
                        }));
                        *ech_steps = grown.into_boxed_slice();
                        ech_steps.len() - 1
                    });
                    // A DNS message cannot hold 65 535 ECH configurations.
                    u16::try_from(i + 1).unwrap_or(u16::MAX)
                }
                _ => 0,
            };
            match endpoints.iter_mut().find(|e| e.target == target) {
                // The same address and port in two groups is tried once, in the first.
                Some(e) if e.listed => {}
                Some(e) => {
                    changed |= e.group != c.group;
                    e.group = c.group;
                    e.tls_variant = variant;
                    e.without_svcb = c.without_svcb;
                    e.listed = true;
                }
                None => {
                    endpoints.push(Endpoint {
                        logical: c.ip,
                        target,
                        source: source_of(sources, c.ip),
                        tried: false,
                        group: c.group,
                        without_svcb: c.without_svcb,
                        tls_variant: variant,
                        listed: true,
                    });
                    changed = true;
                }
            }
        });
        // HEv3 §7: an attempted endpoint keeps its place; an untried one that left goes.
        if !first {
            let before = endpoints.len();
            endpoints.retain(|e| e.listed || e.tried);
            changed |= before != endpoints.len();
        }
        for ip in disallowed {
            let why = format!("the policy allows no {}", Family::of(ip));
            self.resolution
                .note_skipped(self.connectivity, ip.to_string(), why);
        }
        self.order_dirty |= changed;
    }

    /// Sorts the endpoints: group by group (RFC 9460 §2.4.1, HEv3 §4.3: a service's
    /// endpoints before those of the next), each group by RFC 6724 and route memory.
    fn reorder(&mut self, now: Instant) {
        let ctx = OrderContext {
            memory: Some(&self.memory).filter(|m| m.is_enabled()),
            preference: self.policy.family,
            preferred_family_count: self.policy.preferred_family_count,
            slower_margin: self.policy.min_attempt_delay,
            now,
        };
        if self.endpoints.len() > 1 {
            let first = self.endpoints[0].group;
            if self.endpoints.iter().all(|e| e.group == first) {
                let sorted = order(self.endpoints.drain(..).collect(), &ctx);
                self.endpoints.extend(sorted);
            } else {
                let mut all: Vec<Endpoint> = self.endpoints.drain(..).collect();
                all.sort_by_key(|e| e.group);
                while !all.is_empty() {
                    let g = all[0].group;
                    let n = all.iter().take_while(|e| e.group == g).count();
                    let rest = all.split_off(n);
                    self.endpoints.extend(order(all, &ctx));
                    all = rest;
                }
            }
        }
        self.order_dirty = false;
    }

    fn has_candidate(&self) -> bool {
        !self.deferred.is_empty()
            || (self.resolution.moved_on() && self.endpoints.iter().any(|e| !e.tried))
    }

    /// When the next attempt may start: see the module's launch rules.
    fn launch_gate(&self) -> Instant {
        let at = match self.pacing.last_start {
            None => self.started,
            Some(last) => {
                let floor = last + HARD_MIN_ATTEMPT_DELAY;
                if self.in_flight() == 0 || self.latest_ended() {
                    match self.policy.start_floor {
                        StartFloor::TimerDriven => last,
                        StartFloor::EveryStart => floor,
                    }
                } else {
                    self.pacing.next_at.map_or(floor, |t| t.max(floor))
                }
            }
        };
        self.second_choice_hold().map_or(at, |hold| at.max(hold))
    }

    /// How long the next candidate waits because route memory says it is a second choice.
    ///
    /// The move-on rule (HEv3 §4.2) starts the first attempt as soon as the preferred family's
    /// answer is in. When memory says that answer holds only second choices (routes that
    /// failed within the TTL, or a family whose path failed or is slower), an answer still
    /// pending may bring a better one: the candidate then waits for it, but never past the
    /// Resolution Delay after the first positive answer (RFC 8305 §3, the same bound the
    /// standard puts on waiting for AAAA). Without this, a second contact whose AAAA answer
    /// happens to arrive first would start the remembered-bad route anyway.
    fn second_choice_hold(&self) -> Option<Instant> {
        if !self.deferred.is_empty() || !self.resolution.pending() || !self.memory.is_enabled() {
            return None;
        }
        let first = self.resolution.first_positive_at()?;
        let next = self.endpoints.iter().find(|e| !e.tried)?;
        let now = self.last_now;
        let family = Family::of(next.logical);
        let m = &self.memory;
        let second_choice = m.is_postponed(next.target, now)
            || m.family_path_failed(family, now)
            || m.family_is_worse(family, self.policy.min_attempt_delay, now);
        second_choice.then(|| first + self.policy.resolution_delay)
    }

    /// Decides what to do at `now`: send the queries, start what may start, or fail.
    fn decide(&mut self, now: Instant) {
        if matches!(self.phase, RacePhase::Waiting) {
            return;
        }
        if !self.queries_sent && self.phase.is_running() {
            // They go out from `queries`, ahead of anything this decision queues.
            self.queries_sent = true;
        }
        if matches!(self.phase, RacePhase::Racing) {
            if self.order_dirty {
                self.reorder(now);
            }
            while matches!(self.phase, RacePhase::Racing)
                && self.has_candidate()
                && now >= self.launch_gate()
            {
                if self.in_flight() >= self.policy.max_concurrent_attempts.get() {
                    self.evict_oldest(now);
                }
                if !self.launch(now) {
                    break;
                }
            }
        }
        let idle = matches!(self.phase, RacePhase::Resolving | RacePhase::Racing)
            && self.in_flight() == 0
            && !self.has_candidate()
            && !self.resolution.pending();
        if idle {
            let tried = self.attempts.iter().any(|a| a.exchange == self.exchange);
            let kind = match self.resolution.unroutable_family() {
                _ if tried => RaceErrorKind::AllAttemptsFailed,
                Some(family) if self.endpoints.is_empty() => {
                    RaceErrorKind::NetworkUnreachable(family)
                }
                _ => RaceErrorKind::NoAddresses,
            };
            self.fail(kind, now);
        }
    }

    /// Starts the next plan: a queued one first, else the next untried endpoint. Returns
    /// whether one started.
    fn launch(&mut self, now: Instant) -> bool {
        let plan = match self.deferred.pop() {
            Some(plan) => plan,
            None => {
                let Some(e) = self.endpoints.iter_mut().find(|e| !e.tried) else {
                    return false;
                };
                e.tried = true;
                let route = Route {
                    target: e.target,
                    logical: e.logical,
                    proxy: self.address.proxy_shared().cloned(),
                };
                let variant = e.tls_variant;
                let without_svcb = e.without_svcb;
                let mut plan = ConnectPlan::new(route, self.tls_for(variant));
                plan.without_svcb = without_svcb;
                // No ClientHello before SVCB resolution has finished (draft-ietf-tls-esni;
                // HEv3 §6.1 R-34): TCP may go ahead, TLS waits for the HTTPS answer.
                plan.hold_tls = plan.tls.is_some() && self.resolution.holds_tls();
                plan
            }
        };
        let id = match self.attempts.last() {
            None => AttemptId::FIRST,
            Some(a) => match a.id.next() {
                Some(id) => id,
                // Four billion attempts in one race: refuse to start more.
                None => return false,
            },
        };
        let target = plan.route.target;
        let deadline = self
            .timers
            .get(Timer::Deadline)
            .unwrap_or(now + self.policy.connect_timeout);
        let timeout_at = (now + self.policy.attempt_timeout).min(deadline);
        self.attempts.0.push(AttemptRecord {
            id,
            plan: plan.clone(),
            started: now,
            tcp_connected: None,
            ended: None,
            state: AttemptState::Connecting,
            alpn: None,
            timeout_at,
            exchange: self.exchange,
        });
        let cad = self.attempt_delay(target).max(HARD_MIN_ATTEMPT_DELAY);
        self.pacing = Pacing {
            last_start: Some(now),
            latest: Some(id),
            next_at: Some(now + cad),
        };
        self.out.push_back(Output::StartAttempt { id, plan });
        true
    }

    /// The TLS step for an endpoint's `tls_variant`.
    fn tls_for(&self, variant: u16) -> Option<Arc<TlsStep>> {
        match variant {
            0 => self.tls.clone(),
            n => self
                .ech_steps
                .get(usize::from(n) - 1)
                .cloned()
                .or_else(|| self.tls.clone()),
        }
    }

    /// Lets held attempt `i` go on to TLS with its endpoint's step as the answers now say
    /// (with ECH if its service has it), or cancels it if its endpoint is no longer listed:
    /// a pre-connection is used only if it is consistent with a record (RFC 9460 §5.1).
    fn resume(&mut self, i: usize, now: Instant) {
        let target = self.attempts[i].plan.route.target;
        let Some(variant) = self
            .endpoints
            .iter()
            .find(|e| e.target == target && e.listed)
            .map(|e| e.tls_variant)
        else {
            self.cancel(i, CancelReason::Withdrawn, now);
            return;
        };
        let tls = self.tls_for(variant);
        let a = &mut self.attempts[i];
        a.plan.tls = tls;
        a.plan.hold_tls = false;
        a.state = AttemptState::Securing;
        let (id, plan) = (a.id, a.plan.clone());
        self.out.push_back(Output::ResumeAttempt { id, plan });
    }

    /// Resumes every held attempt whose TCP handshake is done, once no HTTPS answer is
    /// awaited any more.
    fn resume_held(&mut self, now: Instant) {
        if self.resolution.holds_tls() {
            return;
        }
        for i in 0..self.attempts.len() {
            if self.attempts[i].state == AttemptState::Held {
                self.resume(i, now);
            }
        }
    }

    /// The TLS step every attempt of this race shares, for TLS origins.
    /// The TLS step of every attempt to `address`: SNI names the origin (RFC 9460 §9.4), and
    /// ALPN offers what the policy says the client speaks (HEv3 §6.2).
    fn tls_step(address: &Address, offer: AlpnOffer) -> Option<Arc<TlsStep>> {
        if !address.is_tls() {
            return None;
        }
        Some(Arc::new(TlsStep {
            server_name: match address.host() {
                Host::Name(n) => n.clone(),
                Host::Ip(ip) => ip.to_string(),
            },
            alpn: offer.ids().to_vec(),
            config: 0,
            ech: None,
            ech_retry: false,
        }))
    }

    /// The Connection Attempt Delay after starting an attempt to `target` (profile P2): from
    /// the route's RTT, else the family's recent RTT on this network, else the fixed default.
    fn attempt_delay(&self, target: SocketAddr) -> Duration {
        let now = self.last_now;
        // A disabled view (a loopback literal's race) knows no RTT: not asked.
        let memory = Some(&self.memory).filter(|m| m.is_enabled());
        let srtt = memory.and_then(|m| {
            m.srtt(target, now)
                .or_else(|| m.family_srtt(Family::of(target.ip()), now))
        });
        self.policy.attempt_delay_for(srtt)
    }

    /// Records the end of attempt `i`'s TCP handshake: a measured RTT sample.
    fn note_tcp(&mut self, i: usize, now: Instant) {
        let a = &mut self.attempts[i];
        a.tcp_connected = Some(now);
        let (target, rtt) = (a.plan.route.target, now - a.started);
        self.learn(target, now, LessonKind::Connected { rtt });
    }

    fn on_tcp_connected(&mut self, i: usize, now: Instant) {
        if self.attempts[i].tcp_connected.is_some() {
            return;
        }
        self.note_tcp(i, now);
        let tunnel = self.attempts[i].plan.tunnel;
        if tunnel {
            self.attempts[i].state = AttemptState::Tunneling;
        }
        if self.attempts[i].plan.tls.is_none() {
            return;
        }
        let id = self.attempts[i].id;
        if self.attempts[i].plan.hold_tls {
            self.attempts[i].state = AttemptState::Held;
            if !self.resolution.holds_tls() {
                self.resume(i, now);
            }
        } else if !tunnel {
            self.attempts[i].state = AttemptState::Securing;
            self.out.push_back(Output::StartTls(id));
        }
        match self.policy.win_at {
            WinAt::Tcp => {
                // OkHttp R6: the TCP winner does TLS alone; the others stop now.
                self.cancel_in_flight(CancelReason::LostRace, Some(id), now);
                self.phase = RacePhase::TlsOwner(id);
            }
            WinAt::Handshake => {
                // HEv3 §6.1, profile P6: extend the timer to an estimate of full establishment.
                if self.pacing.latest == Some(id)
                    && let Some(t) = self.pacing.next_at.filter(|t| now < *t)
                {
                    let cad = self.attempt_delay(self.attempts[i].plan.route.target);
                    self.pacing.next_at = Some(t.max(now + cad));
                }
            }
        }
    }

    /// Attempt `i`'s proxy tunnel is open: TLS follows ([`Output::StartTls`]), if its plan has
    /// it (a plan without TLS stays in the tunnel step until it is reported connected).
    fn on_tunnel_open(&mut self, i: usize) {
        let a = &mut self.attempts[i];
        if a.state == AttemptState::Tunneling && a.plan.tls.is_some() {
            a.state = AttemptState::Securing;
            self.out.push_back(Output::StartTls(a.id));
        }
    }

    /// Ends attempt `i` in `state`.
    fn end(&mut self, i: usize, state: AttemptState, now: Instant) {
        let a = &mut self.attempts[i];
        a.state = state;
        a.ended = Some(now);
        if matches!(self.phase, RacePhase::TlsOwner(owner) if owner == a.id) {
            self.phase = RacePhase::Racing;
        }
    }

    /// The one way the race stops an attempt, whatever the reason. The error records the step
    /// the attempt was in; route memory learns a lower bound on the route's RTT if its TCP
    /// handshake never finished, and a failure if it timed out; a loser's plan is queued for
    /// reuse (OkHttp's deferred plans).
    fn cancel(&mut self, i: usize, reason: CancelReason, now: Instant) {
        let a = &self.attempts[i];
        let (id, target, step) = (a.id, a.plan.route.target, a.state.step());
        let elapsed = now - a.started;
        let (kind, detail) = match reason {
            CancelReason::AttemptTimeout => (
                AttemptErrorKind::TimedOut,
                format!("no answer within {:?}", self.policy.attempt_timeout),
            ),
            CancelReason::Deadline => (AttemptErrorKind::TimedOut, reason.to_string()),
            CancelReason::LostRace
            | CancelReason::Evicted
            | CancelReason::Abandoned
            | CancelReason::Withdrawn => (AttemptErrorKind::Cancelled, reason.to_string()),
        };
        if step == Phase::Tcp {
            self.learn(target, now, LessonKind::Unfinished { elapsed });
        }
        if reason == CancelReason::AttemptTimeout {
            let phase = step;
            self.learn(target, now, LessonKind::Failed { kind, phase });
        }
        if reason == CancelReason::LostRace {
            self.deferred.insert(0, self.attempts[i].plan.retry());
        }
        self.out.push_back(Output::CancelAttempt { id, reason });
        let error = AttemptError::new(kind, step, detail);
        self.end(i, AttemptState::Cancelled { reason, error }, now);
    }

    /// Cancels every attempt in flight except `keep`, in start order.
    fn cancel_in_flight(&mut self, reason: CancelReason, keep: Option<AttemptId>, now: Instant) {
        for i in 0..self.attempts.len() {
            let a = &self.attempts[i];
            if a.in_flight() && Some(a.id) != keep {
                self.cancel(i, reason, now);
            }
        }
    }

    fn evict_oldest(&mut self, now: Instant) {
        if let Some(i) = self.attempts.iter().position(AttemptRecord::in_flight) {
            self.cancel(i, CancelReason::Evicted, now);
        }
    }

    fn cancel_queries(&mut self) {
        // A race that ended while waiting never sent its queries: nothing to cancel.
        if self.queries_sent {
            for query in self.resolution.pending_queries() {
                self.out.push_back(Output::CancelQuery(query));
            }
        } else {
            // Never sent: none of them goes out.
            self.queries_out = u8::MAX;
        }
        self.queries_sent = true;
        self.resolution.abandon_pending();
    }

    fn win(&mut self, winner: Winner, index: Option<usize>, now: Instant) {
        let keep = index.map(|i| self.attempts[i].id);
        self.cancel_in_flight(CancelReason::LostRace, keep, now);
        if let Some(i) = index {
            self.end(i, AttemptState::Won, now);
        }
        self.phase = RacePhase::Won { winner, at: now };
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

    fn fail(&mut self, kind: RaceErrorKind, now: Instant) {
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
        self.phase = RacePhase::Failed;
        self.timers.stop_all();
        self.out.push_back(Output::Failed(RaceError {
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
        }));
    }
}

impl std::fmt::Debug for FastFallbackExchangeFinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastFallbackExchangeFinder")
            .field("address", &self.address)
            .field("phase", &self.phase)
            .field("attempts", &self.attempts.len())
            .field("in_flight", &self.in_flight())
            .field("deferred", &self.deferred.len())
            .field("timers", &self.timers)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastfallback_proto::QueryKind;

    fn query(kind: QueryKind) -> Output<ConnectPlan> {
        Output::StartQuery(Query::origin(kind))
    }

    #[test]
    fn the_output_queue_is_first_in_first_out_across_its_inline_head() {
        let mut q = OutQueue::default();
        assert!(q.is_empty());
        q.push_back(query(QueryKind::Https));
        q.push_back(query(QueryKind::Aaaa));
        assert_eq!(q.pop_front(), Some(query(QueryKind::Https)));
        // The head is free but an older output waits behind it: a new one goes last.
        q.push_back(query(QueryKind::A));
        assert!(!q.is_empty());
        assert_eq!(q.pop_front(), Some(query(QueryKind::Aaaa)));
        assert_eq!(q.pop_front(), Some(query(QueryKind::A)));
        assert_eq!(q.pop_front(), None);
        assert!(q.is_empty());
        q.push_back(query(QueryKind::A));
        assert_eq!(q.pop_front(), Some(query(QueryKind::A)));
    }
}

/// The race's state is boxed once per race. glibc's per-thread cache (tcache) serves
/// allocations of up to 1 032 bytes on 64-bit targets; a larger one takes `malloc`'s general
/// path, which cost ~400 more instructions per connect when the state had grown to 1 040
/// bytes (docs/benchmarks.md).
#[cfg(all(test, target_pointer_width = "64"))]
mod layout {
    use super::FastFallbackExchangeFinder;

    #[test]
    fn the_race_state_fits_the_allocators_per_thread_cache() {
        let size = size_of::<FastFallbackExchangeFinder>();
        assert!(
            size <= 1032,
            "the race state is {size} bytes, over glibc's 1 032-byte tcache limit"
        );
    }
}
