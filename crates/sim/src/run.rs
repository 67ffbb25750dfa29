//! Playing a scenario on virtual time.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use fastfallback_plan::{AttemptRecord, ConnectPlan, FastFallbackExchangeFinder, RaceInput};
use fastfallback_proto::{
    Alpn, AttemptError, AttemptErrorKind, AttemptEvent, AttemptId, CancelReason, DnsAnswer,
    Instant, Output, Phase, PooledId, Query, RaceError, TransportKind, Winner,
};
use fastfallback_route::{Lesson, MemoryView, Route, SourceSelector};

use crate::{Behaviour, Scenario};

/// One entry of the ordered event log (standards §0.2). Times are in ms.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Event {
    /// A query was sent.
    DnsQuery {
        /// When.
        t: u64,
        /// Which.
        query: Query,
    },
    /// An answer was delivered to the race.
    DnsAnswer {
        /// When.
        t: u64,
        /// To which query.
        query: Query,
        /// A short summary.
        summary: String,
    },
    /// A query was abandoned.
    DnsCancelled {
        /// When.
        t: u64,
        /// Which.
        query: Query,
    },
    /// An attempt started.
    AttemptStart {
        /// When.
        t: u64,
        /// Which.
        id: AttemptId,
        /// Where it connects.
        target: SocketAddr,
        /// What it does.
        plan: String,
    },
    /// A held attempt went on to TLS (the HTTPS answer was in).
    AttemptResumed {
        /// When.
        t: u64,
        /// Which.
        id: AttemptId,
        /// What it does now.
        plan: String,
    },
    /// An attempt's TCP handshake finished.
    TcpConnected {
        /// When.
        t: u64,
        /// Which.
        id: AttemptId,
    },
    /// An attempt failed.
    AttemptFailed {
        /// When.
        t: u64,
        /// Which.
        id: AttemptId,
        /// Why.
        error: AttemptError,
    },
    /// An attempt was cancelled by the race.
    AttemptCancelled {
        /// When.
        t: u64,
        /// Which.
        id: AttemptId,
        /// Why.
        reason: CancelReason,
    },
    /// The race was won.
    Done {
        /// When.
        t: u64,
        /// By what.
        winner: Winner,
    },
    /// The race failed.
    Failed {
        /// When.
        t: u64,
        /// Why.
        error: RaceError,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DnsQuery { t, query } => write!(f, "{t:>6} ms  query {query}"),
            Self::DnsAnswer { t, query, summary } => {
                write!(f, "{t:>6} ms  {query} answer {summary}")
            }
            Self::DnsCancelled { t, query } => write!(f, "{t:>6} ms  {query} query abandoned"),
            Self::AttemptStart { t, id, plan, .. } => write!(f, "{t:>6} ms  start {id} {plan}"),
            Self::TcpConnected { t, id } => write!(f, "{t:>6} ms  {id} tcp connected"),
            Self::AttemptResumed { t, id, plan } => write!(f, "{t:>6} ms  {id} resumed: {plan}"),
            Self::AttemptFailed { t, id, error } => write!(f, "{t:>6} ms  {id} failed: {error}"),
            Self::AttemptCancelled { t, id, reason } => {
                write!(f, "{t:>6} ms  {id} cancelled: {reason}")
            }
            Self::Done {
                t,
                winner: Winner::Attempt(id),
            } => write!(f, "{t:>6} ms  won by {id}"),
            Self::Done {
                t,
                winner: Winner::Pooled(p),
            } => write!(f, "{t:>6} ms  won by {p}"),
            Self::Failed { t, error } => write!(f, "{t:>6} ms  failed: {error}"),
        }
    }
}

/// The record of one played scenario.
#[derive(Clone, Debug)]
pub struct Run {
    /// The ordered event log.
    pub events: Vec<Event>,
    /// Every attempt, as the race recorded it.
    pub attempts: Vec<AttemptRecord>,
    /// The most attempts in flight at once.
    pub peak_in_flight: usize,
    /// Sockets still open when the run ended (should be 0 after a failure and 1, the
    /// winner's, after a win).
    pub open_sockets: usize,
    /// The endpoint order at the end (attempted ones included).
    pub final_order: Vec<SocketAddr>,
    /// Whether the race reported itself finished.
    pub finished: bool,
    /// How often the race asked to be woken at a time already past (should be 0).
    pub past_deadlines: usize,
    /// Every lesson the race taught route memory, in order.
    pub lessons: Vec<Lesson>,
    /// Whether the race ignored route memory ([`fastfallback_route::RouteMemory::explore_one_in`]).
    pub history_ignored: bool,
}

#[derive(Debug)]
enum Input {
    Dns(Query, DnsAnswer),
    Attempt(AttemptId, AttemptEvent<ConnectPlan>),
    Pooled,
    Abandon,
    Release(Vec<Lesson>),
}

fn ceil_ms(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// Bounds the number of turns, so a bug can never hang a test.
const MAX_TURNS: usize = 1_000_000;

/// One scenario being played, a turn at a time. [`Scenario::run`] plays one to the end;
/// [`run_together`] interleaves several that share route memory, as concurrent races in one
/// process would.
pub struct Player<'a> {
    scenario: &'a Scenario,
    race: FastFallbackExchangeFinder,
    queue: BTreeMap<(u64, u64), Input>,
    seq: u64,
    pending_answers: Vec<(u64, Query, DnsAnswer)>,
    /// What an attempt with TLS does once the race lets its TLS start (`StartTls`, or
    /// `ResumeAttempt` for a held plan): each event with its delay after that.
    held: HashMap<AttemptId, Vec<(u64, Input)>>,
    per_addr: HashMap<IpAddr, usize>,
    /// The same count for QUIC attempts, which follow their own behaviours.
    per_addr_quic: HashMap<IpAddr, usize>,
    open: HashMap<AttemptId, bool>,
    events: Vec<Event>,
    lessons: Vec<Lesson>,
    peak: usize,
    exchanges_left: usize,
    now: u64,
    past_deadlines: usize,
    turns: usize,
}

impl<'a> Player<'a> {
    /// Starts the race at the scenario's start time: it takes its view of route memory now.
    pub fn new(scenario: &'a Scenario) -> Self {
        let t0 = Instant::from_millis(scenario.start_at);
        let memory = match &scenario.db {
            Some(db) => db.view(scenario.network, &scenario.address, t0),
            None => MemoryView::disabled(),
        };
        // Alt-Svc's HTTP/3 alternatives, as the driver asks for them: only when racing QUIC.
        let alternatives = match &scenario.db {
            Some(db) if scenario.policy.quic => {
                db.alternatives(scenario.network, &scenario.address, t0)
            }
            _ => Vec::new(),
        };
        let input = RaceInput::new(scenario.connectivity)
            .memory(memory)
            .seed(scenario.seed)
            .waiting(scenario.waiting)
            .alternatives(alternatives);
        let race = FastFallbackExchangeFinder::new(
            scenario.address.clone(),
            scenario.policy.clone(),
            input,
            t0,
        );
        let mut p = Self {
            scenario,
            race,
            queue: BTreeMap::new(),
            seq: 0,
            pending_answers: scenario
                .answers
                .iter()
                .map(|(t, k, a)| (t + scenario.start_at, k.clone(), a.clone()))
                .collect(),
            held: HashMap::new(),
            per_addr: HashMap::new(),
            per_addr_quic: HashMap::new(),
            open: HashMap::new(),
            events: Vec::new(),
            lessons: Vec::new(),
            peak: 0,
            exchanges_left: scenario.exchanges,
            now: scenario.start_at,
            past_deadlines: 0,
            turns: 0,
        };
        if let Some(t) = scenario.pooled_at {
            p.push(t + scenario.start_at, Input::Pooled);
        }
        if let Some(t) = scenario.abandon_at {
            p.push(t + scenario.start_at, Input::Abandon);
        }
        if let Some((t, news)) = &scenario.release_at {
            p.push(t + scenario.start_at, Input::Release(news.clone()));
        }
        p.act();
        p
    }

    fn push(&mut self, t: u64, input: Input) {
        self.seq += 1;
        self.queue.insert((t, self.seq), input);
    }

    /// The race's phase now.
    pub fn phase(&self) -> fastfallback_plan::RacePhase {
        self.race.phase()
    }

    /// The race's attempts so far, with their states.
    pub fn attempts(&self) -> &[AttemptRecord] {
        self.race.attempts()
    }

    /// When this player next has something to do, if ever.
    pub fn next_time(&self) -> Option<u64> {
        let next_input = self.queue.keys().next().map(|(t, _)| *t);
        // Deadlines can fall between whole milliseconds (a delay of 3 × srtt); the sim's clock
        // ticks in whole milliseconds, so it wakes at the first tick at or after them.
        let next_timer = self.race.poll_timeout().map(ceil_ms);
        match (next_input, next_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (Some(a), None) | (None, Some(a)) => Some(a),
            (None, None) => None,
        }
        .map(|t| t.max(self.now))
    }

    /// Plays the next instant: delivers every input due then (in one turn, before the race
    /// decides), fires expired timers, acts on the outputs and hands the lessons to route
    /// memory. Returns `false` when nothing is left to do.
    pub fn step(&mut self) -> bool {
        if self.turns >= MAX_TURNS {
            return false;
        }
        self.turns += 1;
        if self
            .race
            .poll_timeout()
            .is_some_and(|t| ceil_ms(t) < self.now)
        {
            self.past_deadlines += 1;
        }
        let Some(next) = self.next_time() else {
            return false;
        };
        self.now = next;
        let t = Instant::from_millis(self.now);
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            match entry.remove() {
                Input::Dns(query, answer) => {
                    self.events.push(Event::DnsAnswer {
                        t: self.now,
                        query: query.clone(),
                        summary: summarize(&answer),
                    });
                    let dsts = self.scenario.connectivity.destinations(&answer);
                    let sources = self.scenario.host.sources_for(dsts);
                    self.race.handle_dns(query, &answer, sources, t);
                }
                Input::Attempt(id, ev) => self.deliver(id, ev, t),
                Input::Pooled => {
                    self.race.handle_pooled(PooledId(1), t);
                }
                Input::Abandon => self.race.abandon(t),
                Input::Release(news) => self.race.handle_release(&news, t),
            }
        }
        if self.race.poll_timeout().is_some_and(|d| d <= t) {
            self.race.handle_timeout(t);
        }
        self.act();
        true
    }

    fn deliver(&mut self, id: AttemptId, ev: AttemptEvent<ConnectPlan>, t: Instant) {
        // A real driver drops an attempt's future when the race cancels it; an event for an
        // attempt the race already ended in this same instant is likewise dropped.
        if !self.race.attempt(id).is_some_and(AttemptRecord::in_flight) {
            return;
        }
        let now = self.now;
        match &ev {
            AttemptEvent::TcpConnected => self.events.push(Event::TcpConnected { t: now, id }),
            AttemptEvent::Failed { error, .. } => {
                self.open.insert(id, false);
                self.events.push(Event::AttemptFailed {
                    t: now,
                    id,
                    error: error.clone(),
                });
            }
            AttemptEvent::FollowUp(_) => {
                self.open.insert(id, false);
            }
            AttemptEvent::Connected(_) | AttemptEvent::TunnelOpen => {}
        }
        self.race.handle_attempt(id, ev, t);
    }

    /// Acts on everything the race wants at `now`, then hands its lessons to route memory.
    fn act(&mut self) {
        let now = self.now;
        while let Some(out) = self.race.poll_output(Instant::from_millis(now)) {
            match out {
                Output::StartQuery(query) => {
                    self.events.push(Event::DnsQuery {
                        t: now,
                        query: query.clone(),
                    });
                    let mut due = Vec::new();
                    self.pending_answers.retain(|(t, q, a)| {
                        if *q == query {
                            due.push((*t, Input::Dns(q.clone(), a.clone())));
                            false
                        } else {
                            true
                        }
                    });
                    for (t, input) in due {
                        self.push(t, input);
                    }
                }
                Output::CancelQuery(query) => {
                    self.queue
                        .retain(|_, i| !matches!(i, Input::Dns(q, _) if *q == query));
                    self.events.push(Event::DnsCancelled { t: now, query });
                }
                Output::StartAttempt { id } => {
                    // The race's record of the attempt holds its plan; a copy is kept here,
                    // as the scripted events that follow borrow the run mutably.
                    let Some(plan) = self.race.attempt(id).map(|a| a.plan.clone()) else {
                        continue;
                    };
                    self.events.push(Event::AttemptStart {
                        t: now,
                        id,
                        target: plan.route.target,
                        plan: plan.to_string(),
                    });
                    self.open.insert(id, true);
                    self.peak = self.peak.max(self.open.values().filter(|o| **o).count());
                    let (behaviours, counts) = match plan.transport {
                        TransportKind::Tcp => (&self.scenario.behaviours, &mut self.per_addr),
                        TransportKind::Quic => {
                            (&self.scenario.quic_behaviours, &mut self.per_addr_quic)
                        }
                    };
                    let n = counts.entry(plan.route.target.ip()).or_default();
                    let b = behaviours
                        .get(&plan.route.target.ip())
                        .and_then(|list| list.get(*n).or_else(|| list.last()))
                        .cloned()
                        .unwrap_or(Behaviour::Drop);
                    *n += 1;
                    let mut events = schedule(now, id, &plan, b);
                    if plan.tls.is_some() {
                        // TCP as scripted; TLS waits for the race to let it start (at once,
                        // or at the resume of a held plan), keeping its timing relative to the
                        // TCP handshake.
                        let tcp = events.iter().position(|(_, i)| {
                            matches!(i, Input::Attempt(_, AttemptEvent::TcpConnected))
                        });
                        if let Some(k) = tcp {
                            let tcp_at = events[k].0;
                            let later: Vec<(u64, Input)> = events
                                .drain(k + 1..)
                                .map(|(t, i)| (t.saturating_sub(tcp_at), i))
                                .collect();
                            self.held.insert(id, later);
                        }
                    }
                    for (t, input) in events {
                        self.push(t, input);
                    }
                }
                Output::ResumeAttempt { id } => {
                    let plan = self.race.attempt(id).map(|a| a.plan.to_string());
                    self.events.push(Event::AttemptResumed {
                        t: now,
                        id,
                        plan: plan.unwrap_or_default(),
                    });
                    for (after, input) in self.held.remove(&id).unwrap_or_default() {
                        self.push(now + after, input);
                    }
                }
                Output::StartTls(id) => {
                    for (after, input) in self.held.remove(&id).unwrap_or_default() {
                        self.push(now + after, input);
                    }
                }
                Output::CancelAttempt { id, reason } => {
                    self.held.remove(&id);
                    self.events
                        .push(Event::AttemptCancelled { t: now, id, reason });
                    self.open.insert(id, false);
                    self.queue
                        .retain(|_, i| !matches!(i, Input::Attempt(a, _) if *a == id));
                }
                Output::Done(winner) => {
                    self.events.push(Event::Done { t: now, winner });
                    self.exchanges_left -= 1;
                    if self.exchanges_left > 0 {
                        self.race.next_exchange(Instant::from_millis(now));
                    }
                }
                Output::Failed(error) => {
                    self.events.push(Event::Failed {
                        t: now,
                        error: *error,
                    });
                }
            }
        }
        let lessons: Vec<Lesson> = self.race.drain_lessons().collect();
        if let Some(db) = &self.scenario.db {
            db.learn(
                self.scenario.network,
                &self.scenario.address,
                lessons.iter().copied(),
            );
        }
        self.lessons.extend(lessons);
    }

    /// Ends the run and returns its record.
    pub fn finish(self) -> Run {
        let winners: Vec<AttemptId> = self
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Done {
                    winner: Winner::Attempt(id),
                    ..
                } => Some(*id),
                _ => None,
            })
            .collect();
        let open_sockets = self
            .open
            .iter()
            .filter(|(id, o)| **o && !winners.contains(id))
            .count()
            + winners.len();
        Run {
            events: self.events,
            attempts: self.race.attempts().to_vec(),
            peak_in_flight: self.peak,
            open_sockets,
            final_order: self.race.endpoint_order(),
            finished: self.race.is_finished(),
            past_deadlines: self.past_deadlines,
            lessons: self.lessons,
            history_ignored: self.race.history_ignored(),
        }
    }
}

impl Scenario {
    /// Plays the scenario with exact virtual times.
    pub fn run(&self) -> Run {
        let mut p = Player::new(self);
        while p.step() {}
        p.finish()
    }
}

/// Plays several scenarios at once, as concurrent races of one process: every race starts (and
/// takes its view of route memory) first, then the earliest pending instant of any race is
/// played, ties going to the earlier scenario. Races that share a `RouteDatabase` apply their
/// lessons to it as they learn them.
pub fn run_together(scenarios: &[Scenario]) -> Vec<Run> {
    let mut players: Vec<Player<'_>> = scenarios.iter().map(Player::new).collect();
    for _ in 0..MAX_TURNS {
        let next = players
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.next_time().map(|t| (t, i)))
            .min();
        let Some((_, i)) = next else {
            break;
        };
        if !players[i].step() {
            break;
        }
    }
    players.into_iter().map(Player::finish).collect()
}

fn schedule(now: u64, id: AttemptId, plan: &ConnectPlan, b: Behaviour) -> Vec<(u64, Input)> {
    let tls = plan.tls.is_some();
    let follow = |to: SocketAddr| ConnectPlan {
        route: Route::direct(to),
        attempt: plan.attempt + 1,
        ..plan.clone()
    };
    let ev = |e| Input::Attempt(id, e);
    match b {
        // One handshake, TLS included (HEv3 §6.1).
        Behaviour::Ok { tcp, tls: tls_ms } if plan.transport == TransportKind::Quic => vec![(
            now + tcp + tls_ms,
            ev(AttemptEvent::Connected(Some(Alpn::H3))),
        )],
        Behaviour::Ok { tcp, tls: tls_ms } if tls => vec![
            (now + tcp, ev(AttemptEvent::TcpConnected)),
            (
                now + tcp + tls_ms,
                ev(AttemptEvent::Connected(Some(Alpn::H2))),
            ),
        ],
        Behaviour::Ok { tcp, .. } => vec![(now + tcp, ev(AttemptEvent::Connected(None)))],
        Behaviour::Fail { after, kind } => {
            let error = AttemptError::new(kind, Phase::Tcp, os_error(kind));
            vec![(
                now + after,
                ev(AttemptEvent::Failed {
                    error,
                    follow_up: None,
                }),
            )]
        }
        Behaviour::TlsFail {
            tcp,
            tls: tls_ms,
            follow_up,
        } => {
            let error =
                AttemptError::new(AttemptErrorKind::Tls, Phase::Tls, "handshake failure alert");
            let follow_up = follow_up.map(follow);
            vec![
                (now + tcp, ev(AttemptEvent::TcpConnected)),
                (
                    now + tcp + tls_ms,
                    ev(AttemptEvent::Failed { error, follow_up }),
                ),
            ]
        }
        Behaviour::FollowUp { after, to } => {
            vec![(now + after, ev(AttemptEvent::FollowUp(follow(to))))]
        }
        Behaviour::Drop => Vec::new(),
    }
}

fn os_error(kind: AttemptErrorKind) -> &'static str {
    match kind {
        AttemptErrorKind::Refused => "ECONNREFUSED",
        AttemptErrorKind::Unreachable => "EHOSTUNREACH",
        AttemptErrorKind::Reset => "ECONNRESET",
        _ => "",
    }
}

fn summarize(a: &DnsAnswer) -> String {
    match a {
        DnsAnswer::Addresses(l) if l.is_empty() => "NODATA".into(),
        DnsAnswer::Addresses(l) => {
            let v: Vec<String> = l.iter().map(ToString::to_string).collect();
            format!("[{}]", v.join(", "))
        }
        DnsAnswer::Https(r) if r.is_empty() => "NODATA".into(),
        DnsAnswer::Https(r) => format!("{} record(s)", r.len()),
        DnsAnswer::Error(e) => e.to_string(),
    }
}

fn short(ip: IpAddr) -> String {
    ip.to_string()
}

/// How the run's lists name an attempt: its address, with `quic ` in front for a QUIC one.
fn label(plan: &ConnectPlan) -> String {
    match plan.transport {
        TransportKind::Tcp => short(plan.route.target.ip()),
        TransportKind::Quic => format!("quic {}", short(plan.route.target.ip())),
    }
}

impl Run {
    /// Attempt starts as `(address, ms)`, in start order.
    pub fn starts(&self) -> Vec<(String, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::AttemptStart { t, id, .. } => Some((self.target_of(*id), *t)),
                _ => None,
            })
            .collect()
    }

    /// Attempt starts as `(socket address, ms)`, ports included.
    pub fn start_targets(&self) -> Vec<(SocketAddr, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::AttemptStart { t, target, .. } => Some((*target, *t)),
                _ => None,
            })
            .collect()
    }

    fn target_of(&self, id: AttemptId) -> String {
        self.attempts
            .iter()
            .find(|a| a.id == id)
            .map_or_else(|| "?".into(), |a| label(&a.plan))
    }

    /// The winning attempt's address and the win time, if an attempt won.
    pub fn won(&self) -> Option<(String, u64)> {
        self.events.iter().find_map(|e| match e {
            Event::Done {
                t,
                winner: Winner::Attempt(id),
            } => Some((self.target_of(*id), *t)),
            _ => None,
        })
    }

    /// Every win, in order: `(address or "pooled", ms)`.
    pub fn wins(&self) -> Vec<(String, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Done {
                    t,
                    winner: Winner::Attempt(id),
                } => Some((self.target_of(*id), *t)),
                Event::Done {
                    t,
                    winner: Winner::Pooled(_),
                } => Some(("pooled".into(), *t)),
                _ => None,
            })
            .collect()
    }

    /// The failure and its time, if the race failed.
    pub fn failed(&self) -> Option<(&RaceError, u64)> {
        self.events.iter().find_map(|e| match e {
            Event::Failed { t, error } => Some((error, *t)),
            _ => None,
        })
    }

    /// Held attempts resumed to TLS, as `(address, ms)`, in order.
    pub fn resumed(&self) -> Vec<(String, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::AttemptResumed { t, id, .. } => Some((self.target_of(*id), *t)),
                _ => None,
            })
            .collect()
    }

    /// TCP handshakes that finished, as `(address, ms)`, in order.
    pub fn tcp_connected(&self) -> Vec<(String, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::TcpConnected { t, id } => Some((self.target_of(*id), *t)),
                _ => None,
            })
            .collect()
    }

    /// Cancellations as `(address, ms)`, in order.
    pub fn cancelled(&self) -> Vec<(String, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::AttemptCancelled { t, id, .. } => Some((self.target_of(*id), *t)),
                _ => None,
            })
            .collect()
    }

    /// Attempt failures as `(address, ms)`, in order.
    pub fn failures(&self) -> Vec<(String, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::AttemptFailed { t, id, .. } => Some((self.target_of(*id), *t)),
                _ => None,
            })
            .collect()
    }

    /// Queries sent, in order, with times.
    pub fn queries(&self) -> Vec<(Query, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::DnsQuery { t, query } => Some((query.clone(), *t)),
                _ => None,
            })
            .collect()
    }

    /// Queries abandoned, with times.
    pub fn queries_cancelled(&self) -> Vec<(Query, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::DnsCancelled { t, query } => Some((query.clone(), *t)),
                _ => None,
            })
            .collect()
    }

    /// The timeline, one event per line.
    pub fn timeline(&self) -> String {
        let mut s = String::new();
        for e in &self.events {
            s.push_str(&e.to_string());
            s.push('\n');
        }
        s
    }
}
