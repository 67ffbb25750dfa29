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
use std::net::SocketAddr;
use std::sync::Arc;

use fastfallback_proto::{CancelReason, Family, Instant, Output, Query, QueryKind, RaceErrorKind};
use fastfallback_route::{Address, Connectivity, Lesson, LessonKind, MemoryView, SourceOf};

mod attempts;
mod endpoints;
mod input;
mod out;
mod outcome;
mod pacing;
mod phase;
mod pooled;
mod queries;
mod rare;
mod timers;
mod tls;

pub use attempts::Attempts;
pub use input::RaceInput;
pub use phase::RacePhase;

use crate::answers::Answers;
use crate::timer::{Timer, TimerTable};
use crate::{FallbackPolicy, TlsStep};
use endpoints::Endpoint;
use out::OutQueue;
use pacing::Pacing;

/// A race and what its driver keeps beside it, in one allocation
/// ([`FastFallbackExchangeFinder::boxed_with`] builds it there).
#[derive(Clone, Debug)]
pub struct WithDriver<D> {
    /// The race.
    pub race: FastFallbackExchangeFinder,
    /// What the driver keeps for this race.
    pub driver: D,
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
/// let Some(Output::StartAttempt { id }) = race.poll_output(t20) else { panic!() };
/// // The race's record of the attempt holds its plan.
/// let plan = &race.attempt(id).unwrap().plan;
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
    /// How many of `attempts` are in flight: counted as they start ([`Self::launch`]) and end
    /// ([`Self::end`], the one way an attempt ends), so that asking needs no scan.
    live: u32,
    /// Queued plans and extra TLS steps ([`rare::Rare`]): allocated when first needed.
    rare: Option<Box<rare::Rare>>,
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

impl FastFallbackExchangeFinder {
    // ---- construction ----

    /// A race for `address`, starting at `now`. The policy may be shared with other races
    /// (`Arc<FallbackPolicy>`) or given by value.
    pub fn new(
        address: Address,
        policy: impl Into<Arc<FallbackPolicy>>,
        input: RaceInput,
        now: Instant,
    ) -> Self {
        Self::boxed_with(address, policy.into(), input, now, ()).race
    }

    /// [`Self::new`], built directly on the heap, with what the driver keeps for this race
    /// (`driver`, `()` for nothing) in the same allocation ([`WithDriver`]). A driver that
    /// keeps the race in a `Box` saves copying it there, needs one allocation per race for
    /// both, and hands the race on (as the story of a connection) by moving one pointer. The
    /// race is kept within glibc's small chunks (a test checks it): a driver's part should be
    /// a few words.
    ///
    /// ```
    /// use fastfallback_plan::{FastFallbackExchangeFinder, FallbackPolicy, RaceInput};
    /// use fastfallback_proto::Instant;
    /// use fastfallback_route::{Address, Connectivity};
    /// use std::sync::Arc;
    ///
    /// let address = Address::parse("tcp://192.0.2.1:80").unwrap();
    /// let policy = Arc::new(FallbackPolicy::default());
    /// let input = RaceInput::new(Connectivity::DUAL_STACK);
    /// let notes: Vec<String> = Vec::new();
    /// let mut cell =
    ///     FastFallbackExchangeFinder::boxed_with(address, policy, input, Instant::ZERO, notes);
    /// assert!(cell.race.poll_output(Instant::ZERO).is_some());
    /// cell.driver.push("what the driver keeps".to_owned());
    /// ```
    pub fn boxed_with<D>(
        address: Address,
        policy: Arc<FallbackPolicy>,
        input: RaceInput,
        now: Instant,
        driver: D,
    ) -> Box<WithDriver<D>> {
        let RaceInput {
            mut connectivity,
            mut memory,
            seed,
            waiting,
            alternatives,
        } = input;
        connectivity.v6 &= policy.family.allows(Family::V6);
        connectivity.v4 &= policy.family.allows(Family::V4);
        let explore = policy.route_memory.explore_one_in;
        // A disabled view (a loopback literal's) has nothing to ignore.
        let history_ignored = explore > 0
            && memory.is_enabled()
            && !memory.is_empty()
            && fastfallback_route::splitmix64(seed).is_multiple_of(u64::from(explore));
        if history_ignored {
            memory.forget();
        }
        let (resolution, queries) =
            Self::first_answers(&address, &policy, connectivity, seed, alternatives);
        let phase = if waiting {
            RacePhase::Waiting
        } else if resolution.moved_on() {
            RacePhase::Racing
        } else {
            RacePhase::Resolving
        };
        let timers = TimerTable::with_deadline(now + policy.connect_timeout);
        let tls = Self::tls_step(&address, policy.alpn);
        // Written straight into its allocation: the race is too large to build and then copy.
        let mut cell = Box::write(
            Box::new_uninit(),
            WithDriver {
                race: Self {
                    policy,
                    address,
                    tls,
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
                    attempts: Attempts::default(),
                    live: 0,
                    rare: None,
                    out: OutQueue::default(),
                    exchange: 0,
                    started: now,
                    phase,
                    pacing: Pacing::default(),
                    timers,
                    needs_decision: true,
                    last_now: now,
                },
                driver,
            },
        );
        cell.race.sync_endpoints();
        cell
    }

    // ---- inputs: `handle_dns` (queries.rs), `handle_attempt` (attempts.rs), `handle_pooled`
    // and `handle_release` (pooled.rs), `handle_timeout` (timers.rs) ----

    // ---- mutators ----

    /// The caller gave up: every attempt in flight is cancelled, pending queries are dropped
    /// and nothing more starts. What the race learned so far stays in
    /// [`Self::drain_lessons`].
    pub fn abandon(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.phase.abandon().is_ok() {
            self.cancel_in_flight(CancelReason::Abandoned, None, now);
        }
        self.cancel_queries();
        self.timers.stop_all();
    }

    /// Starts the next exchange on the same finder after a win, reusing queued plans first
    /// (OkHttp's `find()` called again: FF-7, FF-8). The deadline restarts at `now`.
    pub fn next_exchange(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.phase.next_exchange().is_ok() {
            self.needs_decision = true;
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
    pub fn poll_output(&mut self, now: Instant) -> Option<Output> {
        let now = self.clock(now);
        if self.needs_decision && self.out.is_empty() {
            self.needs_decision = false;
            self.decide(now);
            self.rearm();
        }
        // The first queries go out ahead of everything the decisions queued.
        if let Some(q) = self.next_initial_query() {
            return Some(Output::StartQuery(Query::origin(q)));
        }
        self.out.pop_front()
    }

    /// When [`Self::handle_timeout`] should be called next, even if nothing else happens: the
    /// earliest armed [`Timer`]. `None` when only outside events can move the race.
    /// [`Self::timer`] tells the kinds apart.
    #[inline]
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
    #[inline]
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

    /// The origin.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The latest instant the race was handed (its clock never goes back). A race that ended
    /// and was handed nothing since reads the instant it ended: a report's end needs no copy.
    #[inline]
    pub fn latest_instant(&self) -> Instant {
        self.last_now
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

    fn learn(&mut self, target: SocketAddr, at: Instant, kind: LessonKind) {
        if !self.memory.is_enabled() {
            return;
        }
        let lesson = Lesson { target, at, kind };
        self.memory.learn(&lesson);
        self.lessons.push(lesson);
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
}

impl std::fmt::Debug for FastFallbackExchangeFinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastFallbackExchangeFinder")
            .field("address", &self.address)
            .field("phase", &self.phase)
            .field("attempts", &self.attempts.len())
            .field("in_flight", &self.in_flight())
            .field("deferred", &self.deferred().len())
            .field("timers", &self.timers)
            .finish_non_exhaustive()
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
