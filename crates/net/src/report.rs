//! What happened in a race, for people and for programs.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use fastfallback_plan::{AttemptRecord, AttemptState, FastFallbackExchangeFinder};
use fastfallback_proto::{Alpn, AttemptId, DnsAnswer, Instant, PooledId, QueryKind};
use serde::Serialize;

/// The whole story of one race: every DNS query and every attempt, with times relative to the
/// start of the race. Serialises to JSON with `serde_json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RaceReport {
    /// The origin, normalised (`scheme://host:port`; userinfo is never kept).
    pub origin: String,
    /// From the start of the race to its end (win or failure), in ms.
    pub elapsed_ms: f64,
    /// Every DNS query, in the order sent.
    pub queries: Vec<QueryReport>,
    /// Every attempt, in start order.
    pub attempts: Vec<AttemptReport>,
    /// The winning attempt's id, if one won.
    pub winner: Option<u32>,
    /// The pooled connection the race ended on instead, if the pool offered one mid-race
    /// (see [`crate::Pool`]).
    pub pooled: Option<u64>,
    /// The ALPN protocol the winner negotiated, if any.
    pub alpn: Option<String>,
    /// Why the race failed, if it did.
    pub error: Option<String>,
}

/// One DNS query of a race.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueryReport {
    /// `AAAA`, `A` or `HTTPS`.
    pub kind: String,
    /// When it was sent, in ms since the race started.
    pub sent_ms: f64,
    /// When its answer arrived, if it did before the race ended.
    pub answered_ms: Option<f64>,
    /// A summary of the answer (addresses, records, or the error).
    pub answer: Option<String>,
}

/// One attempt of a race.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttemptReport {
    /// The attempt's id (unique within the race; ids grow in start order).
    pub id: u32,
    /// Where its socket connected.
    pub route: SocketAddr,
    /// Its steps, e.g. `tcp [2001:db8::1]:443 → tls example.com [h2, http/1.1]`.
    pub plan: String,
    /// When it started, in ms since the race started.
    pub started_ms: f64,
    /// When its TCP handshake finished, if it did.
    pub tcp_connected_ms: Option<f64>,
    /// When it ended, if it did.
    pub ended_ms: Option<f64>,
    /// `won`, `failed: …`, `cancelled: …`, `followed up` or `in flight`.
    pub outcome: String,
}

impl RaceReport {
    /// Attempts started. Each opened exactly one socket.
    pub fn attempts_started(&self) -> usize {
        self.attempts.len()
    }

    /// The elapsed time as a [`Duration`].
    pub fn elapsed(&self) -> Duration {
        Duration::from_secs_f64(self.elapsed_ms / 1e3)
    }

    /// The winning attempt, if any.
    pub fn winning_attempt(&self) -> Option<&AttemptReport> {
        let id = self.winner?;
        self.attempts.iter().find(|a| a.id == id)
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub(crate) fn attempts_from(records: &[AttemptRecord], t0: Instant) -> Vec<AttemptReport> {
        records
            .iter()
            .map(|r| AttemptReport {
                id: r.id.get(),
                route: r.plan.route.target,
                plan: r.plan.to_string(),
                started_ms: ms(r.started, t0),
                tcp_connected_ms: r.tcp_connected.map(|t| ms(t, t0)),
                ended_ms: r.ended.map(|t| ms(t, t0)),
                outcome: match &r.state {
                    AttemptState::Connecting | AttemptState::Securing => "in flight".to_owned(),
                    AttemptState::Won => "won".to_owned(),
                    AttemptState::Failed(e) => format!("failed: {e}"),
                    AttemptState::FollowedUp => "followed up".to_owned(),
                    AttemptState::Cancelled { reason, .. } => format!("cancelled: {reason}"),
                },
            })
            .collect()
    }
}

/// What a race recorded, kept without formatting anything; a [`RaceReport`] is made from it
/// only when someone asks. Formatting addresses and plans for every connect would cost more
/// than the race itself.
#[derive(Debug)]
pub(crate) struct Story {
    /// The finished race itself (boxed once when the race started): it holds the origin and
    /// every attempt, so nothing is copied out of it.
    pub(crate) race: Box<FastFallbackExchangeFinder>,
    pub(crate) t0: Instant,
    pub(crate) end: Instant,
    pub(crate) queries: Vec<QueryLog>,
    pub(crate) winner: Option<AttemptId>,
    pub(crate) pooled: Option<PooledId>,
    pub(crate) alpn: Option<Alpn>,
    pub(crate) error: Option<String>,
}

/// One DNS query as sent and answered.
#[derive(Debug)]
pub(crate) struct QueryLog {
    pub(crate) kind: QueryKind,
    pub(crate) sent: Instant,
    pub(crate) answered: Option<(Instant, DnsAnswer)>,
}

impl Story {
    pub(crate) fn report(&self) -> RaceReport {
        RaceReport {
            origin: self.race.address().to_string(),
            elapsed_ms: ms(self.end, self.t0),
            queries: self
                .queries
                .iter()
                .map(|q| QueryReport {
                    kind: q.kind.to_string(),
                    sent_ms: ms(q.sent, self.t0),
                    answered_ms: q.answered.as_ref().map(|(t, _)| ms(*t, self.t0)),
                    answer: q.answered.as_ref().map(|(_, a)| summarize(a)),
                })
                .collect(),
            attempts: RaceReport::attempts_from(self.race.attempts(), self.t0),
            winner: self.winner.map(AttemptId::get),
            pooled: self.pooled.map(|p| p.0),
            alpn: self.alpn.as_ref().map(ToString::to_string),
            error: self.error.clone(),
        }
    }
}

/// Milliseconds from `t0` to `t`, to the microsecond.
pub(crate) fn ms(t: Instant, t0: Instant) -> f64 {
    t.saturating_duration_since(t0).as_micros() as f64 / 1e3
}

pub(crate) fn summarize(answer: &DnsAnswer) -> String {
    match answer {
        DnsAnswer::Addresses(a) if a.is_empty() => "no records".to_owned(),
        DnsAnswer::Addresses(a) => a
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        DnsAnswer::Https(r) if r.is_empty() => "no records".to_owned(),
        DnsAnswer::Https(r) => format!("{} record(s)", r.len()),
        DnsAnswer::Error(e) => format!("error: {e}"),
    }
}

impl fmt::Display for RaceReport {
    /// A waterfall: one line per query and attempt, then the verdict.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "race to {}", self.origin)?;
        for q in &self.queries {
            write!(f, "  {:>8.1} ms  query {:<5}", q.sent_ms, q.kind)?;
            match (&q.answered_ms, &q.answer) {
                (Some(t), Some(a)) => writeln!(f, " → {t:.1} ms: {a}")?,
                _ => writeln!(f, " → no answer before the race ended")?,
            }
        }
        for a in &self.attempts {
            write!(f, "  {:>8.1} ms  #{} {}", a.started_ms, a.id, a.plan)?;
            if let Some(t) = a.tcp_connected_ms {
                write!(f, "; tcp at {t:.1} ms")?;
            }
            match a.ended_ms {
                Some(t) => writeln!(f, "; {} at {t:.1} ms", a.outcome)?,
                None => writeln!(f, "; {}", a.outcome)?,
            }
        }
        if let Some(id) = self.pooled {
            return write!(
                f,
                "ended on pooled connection {id} after {:.1} ms",
                self.elapsed_ms
            );
        }
        match (&self.winner, &self.error) {
            (Some(id), _) => {
                write!(f, "won by #{id} after {:.1} ms", self.elapsed_ms)?;
                if let Some(alpn) = &self.alpn {
                    write!(f, " (ALPN {alpn})")?;
                }
                Ok(())
            }
            (None, Some(e)) => write!(f, "failed after {:.1} ms: {e}", self.elapsed_ms),
            (None, None) => write!(f, "unfinished after {:.1} ms", self.elapsed_ms),
        }
    }
}
