//! [`FastFallbackExchangeFinder`]: the race as a sans-IO state machine.
//!
//! ```text
//!                   ┌────────── DNS answers (any order, any time) ──────────┐
//!                   ▼                                                       │
//!  [resolving] ── move-on rule (HEv3 §4.2) ──▶ [racing] ──▶ first success ──▶ [won] ── DNS tail ──▶ ·
//!       │                                         │    ▲                        ▲
//!       │ every answer negative                   │    └─ attempt timers ─┐      │ pooled connection
//!       ▼                                         ▼                      │      │ offered mid-race
//!    [failed] ◀── nothing in flight, nothing pending, nothing untried ◀──┘──────┘
//!           ◀── overall deadline
//! ```
//!
//! Attempts:
//!
//! ```text
//!  start ──▶ in flight ──┬─ Connected ───────────────▶ won
//!                        ├─ Failed / FollowUp ────────▶ failed (follow-up queued first)
//!                        └─ cancelled (lost, timeout, ─▶ cancelled (a retry copy is queued
//!                           deadline, evicted)           last, OkHttp's deferred plans)
//! ```
//!
//! Every attempt ends exactly once. Events for an attempt that already ended are ignored, so a
//! stale result can never be mistaken for a fresh one (OkHttp's stale-queue bug, its spec §2.8).
//!
//! ## Launch rules
//!
//! - The first attempt starts as soon as DNS allows (HEv3 §4.2).
//! - Each start arms the next-attempt timer at `start + CAD` (HEv3 §6), where CAD comes from
//!   [`FallbackPolicy::attempt_delay_for`] with the route's (or the family's) RTT history.
//! - When the most recently started attempt fails, or nothing is in flight, the next starts at
//!   once (reference profile P4); the failure of an older attempt does not advance.
//! - Never two starts within 10 ms (RFC 8305 §5 "MUST NOT").
//! - In TLS mode, a TCP connect of the timer's owner moves the timer to
//!   `max(deadline, t_tcp + CAD)` (HEv3 §6.1, profile P6).
//! - When the list runs out the timer is disarmed but its deadline is kept for endpoints that
//!   arrive later (profile P7).
//! - Queued plans (follow-ups at the front, cancelled losers' retries at the back) go before new
//!   routes (OkHttp R7).
//!
//! ## The driver contract
//!
//! `now` never goes backwards across calls. After handling the events of one instant, drain
//! [`FastFallbackExchangeFinder::poll_output`] until `None`, then sleep until
//! [`FastFallbackExchangeFinder::poll_timeout`] or the next event.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fastfallback_proto::{
    Alpn, AttemptError, AttemptErrorKind, AttemptEvent, AttemptFailure, AttemptId, CancelReason,
    DnsAnswer, Family, Instant, Output, Phase, PooledId, QueryKind, RaceError, RaceErrorKind,
    Winner,
};
use fastfallback_route::order::{OrderContext, Orderable, order};
use fastfallback_route::{
    Address, Connectivity, Host, Resolution, Route, RouteDatabase, Scheme, SourceSelector,
};

use crate::policy::HARD_MIN_ATTEMPT_DELAY;
use crate::{ConnectPlan, FallbackPolicy, TlsStep, WinAt};

/// What a race needs from its surroundings besides the policy: how the host reaches the
/// network, and the shared route memory.
#[derive(Clone)]
pub struct RaceEnv {
    /// Source address selection for RFC 6724 (the driver's UDP probe, or a model in tests).
    pub sources: Arc<dyn SourceSelector>,
    /// Route memory shared by all races of a client, if any.
    pub db: Option<Arc<RouteDatabase>>,
    /// Which families work and the NAT64 prefix.
    pub connectivity: Connectivity,
}

/// How an attempt ended.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum AttemptOutcome {
    /// It won the race.
    Won,
    /// It failed.
    Failed(AttemptError),
    /// It asked for a follow-up plan instead of finishing (not an error).
    FollowedUp,
    /// The race stopped it.
    Cancelled(CancelReason),
}

/// Everything the race knows about one attempt: the basis of its report.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct AttemptRecord {
    /// The attempt.
    pub id: AttemptId,
    /// What it did.
    pub plan: ConnectPlan,
    /// When it started.
    pub started: Instant,
    /// When its TCP handshake finished, if it did.
    pub tcp_connected: Option<Instant>,
    /// When it ended, if it has.
    pub ended: Option<Instant>,
    /// How it ended, if it has.
    pub outcome: Option<AttemptOutcome>,
    /// The ALPN protocol the server chose, for a winner.
    pub alpn: Option<Alpn>,
    timeout_at: Instant,
    exchange: u32,
    error: Option<AttemptError>,
}

impl AttemptRecord {
    fn in_flight(&self) -> bool {
        self.outcome.is_none()
    }
}

#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum EndpointState {
    Untried,
    Attempted,
}

#[derive(Clone, Debug)]
struct Endpoint {
    logical: IpAddr,
    target: SocketAddr,
    state: EndpointState,
}

impl Orderable for Endpoint {
    fn logical(&self) -> IpAddr {
        self.logical
    }
    fn target(&self) -> SocketAddr {
        self.target
    }
}

#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum State {
    Racing,
    Won { at: Instant },
    Failed,
    Abandoned,
}

/// The race for one origin, as a deterministic state machine (see the module docs for the
/// rules, the state diagram and the driver contract).
///
/// ```
/// use fastfallback_plan::{FastFallbackExchangeFinder, FallbackPolicy, RaceEnv};
/// use fastfallback_proto::{AttemptEvent, DnsAnswer, Instant, Output, QueryKind, Winner};
/// use fastfallback_route::{Address, Connectivity, HostModel};
/// use std::sync::Arc;
///
/// let env = RaceEnv {
///     sources: Arc::new(HostModel::e0()),
///     db: None,
///     connectivity: Connectivity::DUAL_STACK,
/// };
/// let addr = Address::parse("tcp://example.com:80").unwrap();
/// let t0 = Instant::from_millis(0);
/// let mut race = FastFallbackExchangeFinder::new(addr, FallbackPolicy::default(), env, t0);
/// assert_eq!(race.poll_output(t0), Some(Output::StartQuery(QueryKind::Aaaa)));
/// assert_eq!(race.poll_output(t0), Some(Output::StartQuery(QueryKind::A)));
/// assert_eq!(race.poll_output(t0), None);
///
/// let t20 = Instant::from_millis(20);
/// race.handle_dns(QueryKind::Aaaa, DnsAnswer::Addresses(vec!["2001:db8::a".parse().unwrap()]), t20);
/// let Some(Output::StartAttempt { id, plan }) = race.poll_output(t20) else { panic!() };
/// assert_eq!(plan.route.target.to_string(), "[2001:db8::a]:80");
///
/// let t40 = Instant::from_millis(40);
/// race.handle_attempt(id, AttemptEvent::Connected(None), t40);
/// assert_eq!(race.poll_output(t40), Some(Output::Done(Winner::Attempt(id))));
/// ```
pub struct FastFallbackExchangeFinder {
    policy: FallbackPolicy,
    address: Address,
    env: RaceEnv,
    resolution: Resolution,
    queries: Vec<QueryKind>,
    queries_sent: bool,
    endpoints: Vec<Endpoint>,
    order_dirty: bool,
    attempts: Vec<AttemptRecord>,
    deferred: VecDeque<ConnectPlan>,
    out: VecDeque<Output<ConnectPlan>>,
    exchange: u32,
    started: Instant,
    deadline: Instant,
    last_start: Option<Instant>,
    next_attempt_at: Option<Instant>,
    latest: Option<AttemptId>,
    latest_failed: bool,
    tls_owner: Option<AttemptId>,
    state: State,
    tail_done: bool,
    last_now: Instant,
}

impl FastFallbackExchangeFinder {
    /// A race for `address`, starting at `now`.
    pub fn new(address: Address, policy: FallbackPolicy, env: RaceEnv, now: Instant) -> Self {
        let mut conn = env.connectivity;
        conn.v6 &= policy.family.allows(Family::V6);
        conn.v4 &= policy.family.allows(Family::V4);
        let (host, _) = address.connect_host();
        let (resolution, queries) = match host {
            Host::Ip(ip) => (Resolution::literal(*ip, conn), Vec::new()),
            Host::Name(_) => {
                let https = policy.query_https
                    && address.scheme() != Scheme::Tcp
                    && address.proxy().is_none();
                let q = conn.queries(https);
                (
                    Resolution::new(&q, conn, policy.resolution_delay, policy.answer_limits),
                    q,
                )
            }
        };
        let deadline = now + policy.connect_timeout;
        let mut race = Self {
            policy,
            address,
            env: RaceEnv {
                connectivity: conn,
                ..env
            },
            resolution,
            queries,
            queries_sent: false,
            endpoints: Vec::new(),
            order_dirty: false,
            attempts: Vec::new(),
            deferred: VecDeque::new(),
            out: VecDeque::new(),
            exchange: 0,
            started: now,
            deadline,
            last_start: None,
            next_attempt_at: None,
            latest: None,
            latest_failed: false,
            tls_owner: None,
            state: State::Racing,
            tail_done: false,
            last_now: now,
        };
        race.sync_endpoints();
        race
    }

    /// Takes in one DNS answer. Answers after a win are accepted for the DNS tail and start
    /// nothing (HEv3 §6).
    pub fn handle_dns(&mut self, kind: QueryKind, answer: DnsAnswer, now: Instant) {
        let now = self.clock(now);
        match self.state {
            State::Racing => {
                self.resolution.handle_answer(kind, answer, now);
                self.sync_endpoints();
            }
            // The DNS tail: the answer is taken (so the query is no longer pending) and starts
            // nothing. Caching it is the driver's job.
            State::Won { .. } => self.resolution.handle_answer(kind, answer, now),
            State::Failed | State::Abandoned => {}
        }
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
        match event {
            AttemptEvent::TcpConnected => self.on_tcp_connected(i, now),
            AttemptEvent::Connected(alpn) => {
                if self.attempts[i].tcp_connected.is_none() {
                    self.attempts[i].tcp_connected = Some(now);
                    self.record_rtt(i, now);
                }
                self.attempts[i].alpn = alpn;
                self.win(Winner::Attempt(id), Some(i), now);
            }
            AttemptEvent::Failed { error, follow_up } => {
                if let Some(db) = &self.env.db {
                    db.failed(self.attempts[i].plan.route.target, error.kind, now);
                }
                self.end_attempt(i, AttemptOutcome::Failed(error.clone()), Some(error), now);
                if let Some(plan) = follow_up {
                    self.deferred.push_front(plan);
                }
            }
            AttemptEvent::FollowUp(plan) => {
                self.end_attempt(i, AttemptOutcome::FollowedUp, None, now);
                self.deferred.push_front(plan);
            }
        }
    }

    /// Offers a pooled connection that became usable mid-race (for example another call's new
    /// HTTP/2 connection). It wins at once and every attempt in flight is cancelled. Returns
    /// whether it was taken: `false` once the race has ended.
    pub fn handle_pooled(&mut self, pooled: PooledId, now: Instant) -> bool {
        let now = self.clock(now);
        if self.state != State::Racing {
            return false;
        }
        self.win(Winner::Pooled(pooled), None, now);
        true
    }

    /// The caller gave up: every attempt in flight is cancelled and nothing more starts.
    pub fn abandon(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.state == State::Racing {
            self.cancel_in_flight(CancelReason::Abandoned, None, now);
            self.state = State::Abandoned;
        }
        for kind in self.resolution.pending_kinds() {
            self.out.push_back(Output::CancelQuery(kind));
        }
        self.tail_done = true;
    }

    /// Starts the next exchange on the same finder after a win, reusing queued plans first
    /// (OkHttp's `find()` called again: FF-7, FF-8). The deadline restarts at `now`.
    pub fn next_exchange(&mut self, now: Instant) {
        let now = self.clock(now);
        if let State::Won { .. } = self.state {
            self.state = State::Racing;
            self.exchange += 1;
            self.started = now;
            self.deadline = now + self.policy.connect_timeout;
            self.tls_owner = None;
        }
    }

    /// The next thing for the driver to do at `now`, if any. Deadlines that have passed are
    /// acted on first.
    pub fn poll_output(&mut self, now: Instant) -> Option<Output<ConnectPlan>> {
        let now = self.clock(now);
        if self.out.is_empty() {
            self.advance(now);
        }
        self.out.pop_front()
    }

    /// The next instant at which the race wants [`Self::poll_output`] called even if nothing
    /// happens before. `None` when only outside events can move it.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Won { at } if !self.tail_done && self.resolution.pending() => {
                return Some(at + self.policy.dns_tail);
            }
            State::Racing => {}
            _ => return None,
        }
        let mut t = Some(self.deadline);
        let mut consider = |c: Option<Instant>| {
            if let Some(c) = c {
                t = Some(t.map_or(c, |t| t.min(c)));
            }
        };
        consider(self.resolution.deadline());
        for a in self.attempts.iter().filter(|a| a.in_flight()) {
            consider(Some(a.timeout_at));
        }
        if self.has_candidate() && self.tls_owner.is_none() {
            consider(Some(self.launch_allowed_at()));
        }
        t
    }

    /// Whether the race has ended (won, failed or abandoned).
    pub fn is_finished(&self) -> bool {
        self.state != State::Racing
    }

    /// Every attempt so far, in start order.
    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.attempts
    }

    /// Every attempt, in start order, taking the race apart (for a report kept after the race,
    /// without copying).
    pub fn into_attempts(self) -> Vec<AttemptRecord> {
        self.attempts
    }

    /// Attempts in flight now.
    pub fn in_flight(&self) -> usize {
        self.attempts.iter().filter(|a| a.in_flight()).count()
    }

    /// The current endpoint order, attempted ones included (for reports and tests).
    pub fn endpoint_order(&self) -> Vec<SocketAddr> {
        self.endpoints.iter().map(|e| e.target).collect()
    }

    /// When the next attempt may start, if one is waiting and the timer is armed.
    pub fn next_attempt_timer(&self) -> Option<Instant> {
        (self.state == State::Racing && self.has_candidate() && self.tls_owner.is_none())
            .then(|| self.launch_allowed_at())
    }

    /// The origin.
    pub fn address(&self) -> &Address {
        &self.address
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

    fn live_index(&self, id: AttemptId) -> Option<usize> {
        let i = usize::try_from(id.0).ok()?;
        self.attempts.get(i).filter(|a| a.in_flight()).map(|_| i)
    }

    /// Reconciles the endpoint list with the current DNS answers: new addresses are added,
    /// untried ones that disappeared are removed, attempted ones stay (HEv3 §7).
    fn sync_endpoints(&mut self) {
        let desired = self.resolution.addresses();
        let port = self
            .resolution
            .service()
            .and_then(|s| s.port)
            .unwrap_or_else(|| self.address.connect_host().1);
        let before = self.endpoints.len();
        self.endpoints
            .retain(|e| e.state == EndpointState::Attempted || desired.contains(&e.logical));
        let mut changed = before != self.endpoints.len();
        for ip in desired {
            if self.endpoints.iter().any(|e| e.logical == ip) {
                continue;
            }
            let target = SocketAddr::new(self.env.connectivity.connect_ip(ip), port);
            self.endpoints.push(Endpoint {
                logical: ip,
                target,
                state: EndpointState::Untried,
            });
            changed = true;
        }
        self.order_dirty |= changed;
    }

    fn reorder(&mut self, now: Instant) {
        let ctx = OrderContext {
            sources: self.env.sources.as_ref(),
            db: self.env.db.as_deref().filter(|db| db.config().enabled),
            preference: self.policy.family,
            preferred_family_count: self.policy.preferred_family_count,
            slower_margin: self.policy.min_attempt_delay,
            now,
        };
        self.endpoints = order(std::mem::take(&mut self.endpoints), &ctx);
        self.order_dirty = false;
    }

    fn has_candidate(&self) -> bool {
        !self.deferred.is_empty()
            || (self.resolution.moved_on()
                && self
                    .endpoints
                    .iter()
                    .any(|e| e.state == EndpointState::Untried))
    }

    fn launch_allowed_at(&self) -> Instant {
        let at = match self.last_start {
            None => self.started,
            Some(last) => {
                let floor = last + HARD_MIN_ATTEMPT_DELAY;
                if self.in_flight() == 0 || self.latest_failed {
                    floor
                } else {
                    self.next_attempt_at.map_or(floor, |t| t.max(floor))
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
        if !self.deferred.is_empty() || !self.resolution.pending() {
            return None;
        }
        let db = self.env.db.as_ref().filter(|db| db.config().enabled)?;
        let first = self.resolution.first_positive_at()?;
        let next = self
            .endpoints
            .iter()
            .find(|e| e.state == EndpointState::Untried)?;
        let now = self.last_now;
        let family = Family::of(next.logical);
        let second_choice = db.is_postponed(next.target, now)
            || db.family_path_failed(family, now)
            || db.family_is_worse(family, self.policy.min_attempt_delay, now);
        second_choice.then(|| first + self.policy.resolution_delay)
    }

    fn advance(&mut self, now: Instant) {
        if !self.queries_sent {
            self.queries_sent = true;
            for &q in &self.queries {
                self.out.push_back(Output::StartQuery(q));
            }
        }
        match self.state {
            State::Racing => {}
            State::Won { at } => {
                if !self.tail_done && now >= at + self.policy.dns_tail {
                    self.tail_done = true;
                    for kind in self.resolution.pending_kinds() {
                        self.out.push_back(Output::CancelQuery(kind));
                    }
                }
                return;
            }
            State::Failed | State::Abandoned => return,
        }
        if now >= self.deadline {
            self.fail(RaceErrorKind::TimedOut, now);
            return;
        }
        for i in 0..self.attempts.len() {
            let a = &self.attempts[i];
            if a.in_flight() && now >= a.timeout_at {
                let err = AttemptError::new(
                    AttemptErrorKind::TimedOut,
                    if a.tcp_connected.is_some() {
                        Phase::Tls
                    } else {
                        Phase::Tcp
                    },
                    format!("no answer within {:?}", self.policy.attempt_timeout),
                );
                if let Some(db) = &self.env.db {
                    db.failed(a.plan.route.target, AttemptErrorKind::TimedOut, now);
                }
                self.out.push_back(Output::CancelAttempt {
                    id: AttemptId(i as u32),
                    reason: CancelReason::AttemptTimeout,
                });
                self.end_attempt(
                    i,
                    AttemptOutcome::Cancelled(CancelReason::AttemptTimeout),
                    Some(err),
                    now,
                );
            }
        }
        if self.resolution.poll(now) && self.order_dirty {
            self.reorder(now);
        }
        while self.tls_owner.is_none() && self.has_candidate() && now >= self.launch_allowed_at() {
            if self.in_flight() >= self.policy.max_concurrent_attempts.get() {
                self.evict_oldest(now);
            }
            self.launch(now);
        }
        let nothing_left = self.in_flight() == 0
            && self.tls_owner.is_none()
            && !self.has_candidate()
            && !self.resolution.pending();
        if nothing_left {
            let exchange_attempts = self.attempts.iter().any(|a| a.exchange == self.exchange);
            let kind = if exchange_attempts {
                RaceErrorKind::AllAttemptsFailed
            } else {
                RaceErrorKind::NoAddresses
            };
            self.fail(kind, now);
        }
    }

    fn launch(&mut self, now: Instant) {
        let plan = match self.deferred.pop_front() {
            Some(plan) => plan,
            None => {
                let Some(e) = self
                    .endpoints
                    .iter_mut()
                    .find(|e| e.state == EndpointState::Untried)
                else {
                    return;
                };
                e.state = EndpointState::Attempted;
                let route = Route {
                    target: e.target,
                    logical: e.logical,
                    proxy: self.address.proxy().cloned(),
                };
                ConnectPlan::new(route, self.tls_step())
            }
        };
        let id = AttemptId(self.attempts.len() as u32);
        let target = plan.route.target;
        let timeout_at = (now + self.policy.attempt_timeout).min(self.deadline);
        self.attempts.push(AttemptRecord {
            id,
            plan: plan.clone(),
            started: now,
            tcp_connected: None,
            ended: None,
            outcome: None,
            alpn: None,
            timeout_at,
            exchange: self.exchange,
            error: None,
        });
        self.last_start = Some(now);
        self.latest = Some(id);
        self.latest_failed = false;
        self.next_attempt_at = Some(now + self.attempt_delay(target));
        self.out.push_back(Output::StartAttempt { id, plan });
    }

    fn tls_step(&self) -> Option<TlsStep> {
        if !self.address.is_tls() {
            return None;
        }
        Some(TlsStep {
            server_name: match self.address.host() {
                Host::Name(n) => n.clone(),
                Host::Ip(ip) => ip.to_string(),
            },
            alpn: vec![Alpn::H2, Alpn::Http11],
        })
    }

    /// The Connection Attempt Delay after starting an attempt to `target` (profile P2): from
    /// the route's RTT, else the family's recent RTT on this network, else the fixed default.
    fn attempt_delay(&self, target: SocketAddr) -> Duration {
        let srtt = self.env.db.as_ref().and_then(|db| {
            db.srtt(target, self.last_now)
                .or_else(|| db.family_srtt(Family::of(target.ip()), self.last_now))
        });
        self.policy.attempt_delay_for(srtt)
    }

    fn on_tcp_connected(&mut self, i: usize, now: Instant) {
        self.attempts[i].tcp_connected = Some(now);
        self.record_rtt(i, now);
        if self.attempts[i].plan.tls.is_none() {
            return;
        }
        let id = self.attempts[i].id;
        match self.policy.win_at {
            WinAt::Tcp => {
                // OkHttp R6: the TCP winner does TLS alone; the others stop now.
                self.cancel_in_flight(CancelReason::LostRace, Some(id), now);
                self.tls_owner = Some(id);
            }
            WinAt::Handshake => {
                // HEv3 §6.1, profile P6: extend the timer to an estimate of full establishment.
                if self.latest == Some(id)
                    && let Some(t) = self.next_attempt_at.filter(|t| now < *t)
                {
                    let cad = self.attempt_delay(self.attempts[i].plan.route.target);
                    self.next_attempt_at = Some(t.max(now + cad));
                }
            }
        }
    }

    fn record_rtt(&self, i: usize, now: Instant) {
        if let Some(db) = &self.env.db {
            let a = &self.attempts[i];
            db.connected(a.plan.route.target, now - a.started, now);
        }
    }

    fn end_attempt(
        &mut self,
        i: usize,
        outcome: AttemptOutcome,
        error: Option<AttemptError>,
        now: Instant,
    ) {
        let a = &mut self.attempts[i];
        a.outcome = Some(outcome);
        a.ended = Some(now);
        a.error = error;
        if self.latest == Some(a.id) {
            self.latest_failed = true;
        }
        if self.tls_owner == Some(a.id) {
            self.tls_owner = None;
        }
    }

    /// Cancels every attempt in flight except `keep`, in start order, queueing a retry copy of
    /// each at the back (OkHttp's `cancelInFlightConnects`).
    fn cancel_in_flight(&mut self, reason: CancelReason, keep: Option<AttemptId>, now: Instant) {
        for i in 0..self.attempts.len() {
            let a = &self.attempts[i];
            if !a.in_flight() || Some(a.id) == keep {
                continue;
            }
            self.deferred.push_back(a.plan.retry());
            let err =
                AttemptError::new(AttemptErrorKind::Cancelled, Phase::Tcp, reason.to_string());
            self.stop(i, reason, err, now);
        }
    }

    /// Stops attempt `i` from the race's side: the driver is told to cancel it, route memory
    /// learns a lower bound on its RTT (if its handshake never finished), and it ends.
    fn stop(&mut self, i: usize, reason: CancelReason, error: AttemptError, now: Instant) {
        let a = &self.attempts[i];
        if a.tcp_connected.is_none()
            && let Some(db) = &self.env.db
        {
            db.unfinished(a.plan.route.target, now - a.started, now);
        }
        self.out
            .push_back(Output::CancelAttempt { id: a.id, reason });
        self.end_attempt(i, AttemptOutcome::Cancelled(reason), Some(error), now);
    }

    fn evict_oldest(&mut self, now: Instant) {
        let Some(i) = self.attempts.iter().position(AttemptRecord::in_flight) else {
            return;
        };
        let reason = CancelReason::Evicted;
        let err = AttemptError::new(AttemptErrorKind::Cancelled, Phase::Tcp, reason.to_string());
        let latest_failed = self.latest_failed;
        self.stop(i, reason, err, now);
        // Eviction makes room; it is not the failure of the latest attempt.
        self.latest_failed = latest_failed;
    }

    fn win(&mut self, winner: Winner, index: Option<usize>, now: Instant) {
        let keep = index.map(|i| self.attempts[i].id);
        self.cancel_in_flight(CancelReason::LostRace, keep, now);
        if let Some(i) = index {
            self.end_attempt(i, AttemptOutcome::Won, None, now);
        }
        self.tls_owner = None;
        self.state = State::Won { at: now };
        self.tail_done = !self.resolution.pending();
        self.out.push_back(Output::Done(winner));
    }

    fn fail(&mut self, kind: RaceErrorKind, now: Instant) {
        if kind == RaceErrorKind::TimedOut {
            for i in 0..self.attempts.len() {
                if !self.attempts[i].in_flight() {
                    continue;
                }
                let a = &self.attempts[i];
                let phase = if a.tcp_connected.is_some() {
                    Phase::Tls
                } else {
                    Phase::Tcp
                };
                let err =
                    AttemptError::new(AttemptErrorKind::TimedOut, phase, "connect deadline passed");
                self.stop(i, CancelReason::Deadline, err, now);
            }
        }
        let attempts = self
            .attempts
            .iter()
            .filter(|a| a.exchange == self.exchange)
            .filter_map(|a| {
                a.error.clone().map(|error| AttemptFailure {
                    id: a.id,
                    addr: a.plan.route.target,
                    started: a.started,
                    elapsed: a.ended.unwrap_or(now) - a.started,
                    error,
                })
            })
            .collect();
        for k in self.resolution.pending_kinds() {
            self.out.push_back(Output::CancelQuery(k));
        }
        self.tail_done = true;
        self.state = State::Failed;
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
        }));
    }
}

impl std::fmt::Debug for FastFallbackExchangeFinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastFallbackExchangeFinder")
            .field("address", &self.address)
            .field("state", &self.state)
            .field("attempts", &self.attempts.len())
            .field("in_flight", &self.in_flight())
            .field("deferred", &self.deferred.len())
            .finish_non_exhaustive()
    }
}
