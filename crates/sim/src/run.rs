//! Playing a scenario on virtual time.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use fastfallback_plan::{AttemptRecord, ConnectPlan, FastFallbackExchangeFinder, RaceEnv};
use fastfallback_proto::{
    Alpn, AttemptError, AttemptErrorKind, AttemptEvent, AttemptId, CancelReason, DnsAnswer,
    Instant, Output, Phase, PooledId, QueryKind, RaceError, Winner,
};
use fastfallback_route::Route;

use crate::{Behaviour, Scenario};

/// One entry of the ordered event log (standards §0.2). Times are in ms.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Event {
    /// A query was sent.
    DnsQuery {
        /// When.
        t: u64,
        /// Which.
        kind: QueryKind,
    },
    /// An answer was delivered to the race.
    DnsAnswer {
        /// When.
        t: u64,
        /// To which query.
        kind: QueryKind,
        /// A short summary.
        summary: String,
    },
    /// A query was abandoned.
    DnsCancelled {
        /// When.
        t: u64,
        /// Which.
        kind: QueryKind,
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
            Self::DnsQuery { t, kind } => write!(f, "{t:>6} ms  query {kind}"),
            Self::DnsAnswer { t, kind, summary } => write!(f, "{t:>6} ms  {kind} answer {summary}"),
            Self::DnsCancelled { t, kind } => write!(f, "{t:>6} ms  {kind} query abandoned"),
            Self::AttemptStart { t, id, plan, .. } => write!(f, "{t:>6} ms  start {id} {plan}"),
            Self::TcpConnected { t, id } => write!(f, "{t:>6} ms  {id} tcp connected"),
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
}

#[derive(Debug)]
enum Input {
    Dns(QueryKind, DnsAnswer),
    Attempt(AttemptId, AttemptEvent<ConnectPlan>),
    Pooled,
    Abandon,
}

/// Bounds the number of turns, so a bug can never hang a test.
const MAX_TURNS: usize = 1_000_000;

impl Scenario {
    /// Plays the scenario with exact virtual times.
    pub fn run(&self) -> Run {
        let env = RaceEnv {
            sources: Arc::new(self.host.clone()),
            db: self.db.clone(),
            connectivity: self.connectivity,
        };
        let t0 = Instant::from_millis(self.start_at);
        let mut race =
            FastFallbackExchangeFinder::new(self.address.clone(), self.policy.clone(), env, t0);
        let mut queue: BTreeMap<(u64, u64), Input> = BTreeMap::new();
        let mut seq = 0u64;
        let mut push = |q: &mut BTreeMap<(u64, u64), Input>, t: u64, input: Input| {
            seq += 1;
            q.insert((t, seq), input);
        };
        let mut sent = Vec::new();
        let mut pending_answers: Vec<(u64, QueryKind, DnsAnswer)> = self
            .answers
            .iter()
            .map(|(t, k, a)| (t + self.start_at, *k, a.clone()))
            .collect();
        if let Some(t) = self.pooled_at {
            push(&mut queue, t + self.start_at, Input::Pooled);
        }
        if let Some(t) = self.abandon_at {
            push(&mut queue, t + self.start_at, Input::Abandon);
        }
        let mut per_addr: HashMap<IpAddr, usize> = HashMap::new();
        let mut open: HashMap<AttemptId, bool> = HashMap::new();
        let mut events = Vec::new();
        let mut peak = 0;
        let mut exchanges_left = self.exchanges;
        let mut now = self.start_at;
        let mut past_deadlines = 0;

        for _ in 0..MAX_TURNS {
            // Act on everything the race wants at `now`.
            while let Some(out) = race.poll_output(Instant::from_millis(now)) {
                match out {
                    Output::StartQuery(kind) => {
                        events.push(Event::DnsQuery { t: now, kind });
                        sent.push(kind);
                        pending_answers.retain(|(t, k, a)| {
                            if *k == kind {
                                push(&mut queue, *t, Input::Dns(*k, a.clone()));
                                false
                            } else {
                                true
                            }
                        });
                    }
                    Output::CancelQuery(kind) => {
                        events.push(Event::DnsCancelled { t: now, kind });
                        queue.retain(|_, i| !matches!(i, Input::Dns(k, _) if *k == kind));
                    }
                    Output::StartAttempt { id, plan } => {
                        events.push(Event::AttemptStart {
                            t: now,
                            id,
                            target: plan.route.target,
                            plan: plan.to_string(),
                        });
                        open.insert(id, true);
                        peak = peak.max(open.values().filter(|o| **o).count());
                        let n = per_addr.entry(plan.route.target.ip()).or_default();
                        let b = self
                            .behaviours
                            .get(&plan.route.target.ip())
                            .and_then(|list| list.get(*n).or_else(|| list.last()))
                            .cloned()
                            .unwrap_or(Behaviour::Drop);
                        *n += 1;
                        schedule(&mut queue, &mut push, now, id, &plan, b);
                    }
                    Output::CancelAttempt { id, reason } => {
                        events.push(Event::AttemptCancelled { t: now, id, reason });
                        open.insert(id, false);
                        queue.retain(|_, i| !matches!(i, Input::Attempt(a, _) if *a == id));
                    }
                    Output::Done(winner) => {
                        events.push(Event::Done { t: now, winner });
                        exchanges_left -= 1;
                        if exchanges_left > 0 {
                            race.next_exchange(Instant::from_millis(now));
                        }
                    }
                    Output::Failed(error) => {
                        events.push(Event::Failed { t: now, error });
                    }
                }
            }
            // Sleep until the next scripted event or the race's next deadline.
            let next_input = queue.keys().next().map(|(t, _)| *t);
            let next_timer = race.poll_timeout().map(Instant::as_millis);
            if next_timer.is_some_and(|t| t < now) {
                past_deadlines += 1;
            }
            let next = match (next_input, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            now = now.max(next);
            // Deliver every input due at `now` in one turn, before the race decides.
            while let Some(entry) = queue.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let t = Instant::from_millis(now);
                match entry.remove() {
                    Input::Dns(kind, answer) => {
                        events.push(Event::DnsAnswer {
                            t: now,
                            kind,
                            summary: summarize(&answer),
                        });
                        race.handle_dns(kind, answer, t);
                    }
                    Input::Attempt(id, ev) => {
                        // A real driver drops an attempt's future when the race cancels it; an
                        // event for an attempt the race already ended in this same instant is
                        // likewise dropped.
                        let live = race
                            .attempts()
                            .get(id.0 as usize)
                            .is_some_and(|a| a.outcome.is_none());
                        if !live {
                            continue;
                        }
                        match &ev {
                            AttemptEvent::TcpConnected => {
                                events.push(Event::TcpConnected { t: now, id });
                            }
                            AttemptEvent::Failed { error, .. } => {
                                open.insert(id, false);
                                events.push(Event::AttemptFailed {
                                    t: now,
                                    id,
                                    error: error.clone(),
                                });
                            }
                            AttemptEvent::FollowUp(_) => {
                                open.insert(id, false);
                            }
                            AttemptEvent::Connected(_) => {}
                        }
                        race.handle_attempt(id, ev, t);
                    }
                    Input::Pooled => {
                        race.handle_pooled(PooledId(1), t);
                    }
                    Input::Abandon => {
                        race.abandon(t);
                    }
                }
            }
        }
        // Drain anything left (cancellations after abandonment).
        while let Some(out) = race.poll_output(Instant::from_millis(now)) {
            if let Output::CancelAttempt { id, reason } = out {
                events.push(Event::AttemptCancelled { t: now, id, reason });
                open.insert(id, false);
            }
        }
        let winners: Vec<AttemptId> = events
            .iter()
            .filter_map(|e| match e {
                Event::Done {
                    winner: Winner::Attempt(id),
                    ..
                } => Some(*id),
                _ => None,
            })
            .collect();
        let open_sockets = open
            .iter()
            .filter(|(id, o)| **o && !winners.contains(id))
            .count()
            + winners.len();
        Run {
            events,
            attempts: race.attempts().to_vec(),
            peak_in_flight: peak,
            open_sockets,
            final_order: race.endpoint_order(),
            finished: race.is_finished(),
            past_deadlines,
        }
    }
}

fn schedule(
    queue: &mut BTreeMap<(u64, u64), Input>,
    push: &mut impl FnMut(&mut BTreeMap<(u64, u64), Input>, u64, Input),
    now: u64,
    id: AttemptId,
    plan: &ConnectPlan,
    b: Behaviour,
) {
    let tls = plan.tls.is_some();
    let follow = |to: SocketAddr| ConnectPlan {
        route: Route::direct(to),
        attempt: plan.attempt + 1,
        ..plan.clone()
    };
    match b {
        Behaviour::Ok { tcp, tls: tls_ms } => {
            if tls {
                push(
                    queue,
                    now + tcp,
                    Input::Attempt(id, AttemptEvent::TcpConnected),
                );
                let alpn = Some(Alpn::H2);
                push(
                    queue,
                    now + tcp + tls_ms,
                    Input::Attempt(id, AttemptEvent::Connected(alpn)),
                );
            } else {
                push(
                    queue,
                    now + tcp,
                    Input::Attempt(id, AttemptEvent::Connected(None)),
                );
            }
        }
        Behaviour::Fail { after, kind } => {
            let error = AttemptError::new(kind, Phase::Tcp, os_error(kind));
            push(
                queue,
                now + after,
                Input::Attempt(
                    id,
                    AttemptEvent::Failed {
                        error,
                        follow_up: None,
                    },
                ),
            );
        }
        Behaviour::TlsFail {
            tcp,
            tls: tls_ms,
            follow_up,
        } => {
            push(
                queue,
                now + tcp,
                Input::Attempt(id, AttemptEvent::TcpConnected),
            );
            let error =
                AttemptError::new(AttemptErrorKind::Tls, Phase::Tls, "handshake failure alert");
            let follow_up = follow_up.map(follow);
            push(
                queue,
                now + tcp + tls_ms,
                Input::Attempt(id, AttemptEvent::Failed { error, follow_up }),
            );
        }
        Behaviour::FollowUp { after, to } => {
            push(
                queue,
                now + after,
                Input::Attempt(id, AttemptEvent::FollowUp(follow(to))),
            );
        }
        Behaviour::Drop => {}
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

impl Run {
    /// Attempt starts as `(address, ms)`, in start order.
    pub fn starts(&self) -> Vec<(String, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::AttemptStart { t, target, .. } => Some((short(target.ip()), *t)),
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
            .get(id.0 as usize)
            .map_or_else(|| "?".into(), |a| short(a.plan.route.target.ip()))
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
    pub fn queries(&self) -> Vec<(QueryKind, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::DnsQuery { t, kind } => Some((*kind, *t)),
                _ => None,
            })
            .collect()
    }

    /// Queries abandoned, with times.
    pub fn queries_cancelled(&self) -> Vec<(QueryKind, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::DnsCancelled { t, kind } => Some((*kind, *t)),
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
