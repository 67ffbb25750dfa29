//! What happened in a race, for people and for programs.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use fastfallback_plan::{
    AttemptRecord, AttemptState, FastFallbackExchangeFinder, RacePhase, WithDriver,
};
use fastfallback_proto::{
    Alpn, AttemptError, CancelReason, DnsAnswer, Family, HttpsRecord, Instant, Phase, Query,
    QueryKind, QueryName, TransportKind, Winner,
};
use serde::Serialize;

/// The whole story of one race: every DNS query and every attempt, with times relative to the
/// start of the race.
///
/// The fields are typed (durations, families, outcome enums, answers as lists). It serialises
/// to JSON with `serde_json` ([`Self::to_json`]); the field names are stable and documented in
/// `docs/report-json.md`: a duration `x` is written as `x_ms`, a number of milliseconds with
/// microsecond precision.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RaceReport {
    /// The origin, normalised (`scheme://host:port`; userinfo is never kept).
    pub origin: String,
    /// From the start of the race to its end (win or failure).
    #[serde(rename = "elapsed_ms", serialize_with = "json::millis")]
    pub elapsed: Duration,
    /// Every DNS query, in the order sent.
    pub queries: Vec<QueryReport>,
    /// Every attempt, in start order.
    pub attempts: Vec<AttemptReport>,
    /// The winning attempt's id, if one won.
    pub winner: Option<u32>,
    /// The pooled connection the race ended on instead, if the pool offered one mid-race
    /// (see `fastfallback_http::Pool`).
    pub pooled: Option<u64>,
    /// The ALPN protocol the winner negotiated, if any.
    #[serde(serialize_with = "json::opt_display")]
    pub alpn: Option<Alpn>,
    /// Why the race failed, if it did.
    pub error: Option<ReportError>,
}

/// One DNS query of a race.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueryReport {
    /// `AAAA`, `A` or `HTTPS`.
    #[serde(serialize_with = "json::display")]
    pub kind: QueryKind,
    /// The name asked about, when it is not the origin's own: an alias target or a
    /// service's TargetName (RFC 9460 §3). Left out of the JSON for the origin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When it was sent, since the race started.
    #[serde(rename = "sent_ms", serialize_with = "json::millis")]
    pub sent: Duration,
    /// When its answer arrived, if it did before the race ended.
    #[serde(rename = "answered_ms", serialize_with = "json::opt_millis")]
    pub answered: Option<Duration>,
    /// The answer, if it arrived: at most [`MAX_RECORDS_LISTED`] of its addresses or
    /// records, in the server's order.
    pub answer: Option<AnswerReport>,
    /// How many more addresses or records the answer held than `answer` lists (an answer of
    /// 100 000 addresses must not make a report of megabytes). Left out of the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub unlisted: usize,
}

/// The most addresses or HTTPS records a [`QueryReport`] lists from one answer.
pub const MAX_RECORDS_LISTED: usize = 16;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A DNS answer as the race received it.
///
/// In JSON, an object with one key: `{"addresses": [...]}`, `{"https": [...]}` or
/// `{"error": "..."}`. An empty list is a negative (NODATA) answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerReport {
    /// The addresses of an A or AAAA answer, in the order the server gave them.
    Addresses(Vec<IpAddr>),
    /// The records of an HTTPS answer (RFC 9460).
    Https(Vec<HttpsReport>),
    /// The query failed.
    Error(String),
}

impl AnswerReport {
    /// The report of `answer`, listing at most [`MAX_RECORDS_LISTED`] of its addresses or
    /// records, and how many it left out.
    fn of(answer: &DnsAnswer) -> (Self, usize) {
        let unlisted = |n: usize| n.saturating_sub(MAX_RECORDS_LISTED);
        match answer {
            DnsAnswer::Addresses(a) => (
                Self::Addresses(a.iter().take(MAX_RECORDS_LISTED).copied().collect()),
                unlisted(a.len()),
            ),
            DnsAnswer::Https(records) => (
                Self::Https(
                    records
                        .iter()
                        .take(MAX_RECORDS_LISTED)
                        .map(HttpsReport::of)
                        .collect(),
                ),
                unlisted(records.len()),
            ),
            DnsAnswer::Error(e) => (Self::Error(e.to_string()), 0),
        }
    }
}

impl fmt::Display for AnswerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Addresses(a) if a.is_empty() => f.write_str("no records"),
            Self::Https(r) if r.is_empty() => f.write_str("no records"),
            Self::Addresses(a) => list(f, a),
            Self::Https(r) => list(f, r),
            Self::Error(e) => write!(f, "error: {e}"),
        }
    }
}

fn list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

/// One HTTPS record (RFC 9460 §2), with the parameters fastfallback reads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HttpsReport {
    /// SvcPriority; 0 is AliasMode.
    pub priority: u16,
    /// TargetName (`.` is the owner name).
    pub target: String,
    /// The `alpn` ids, as text.
    pub alpn: Vec<String>,
    /// The `port` parameter.
    pub port: Option<u16>,
    /// The `ipv4hint` and `ipv6hint` addresses.
    pub hints: Vec<IpAddr>,
    /// Whether the record carries an `ech` configuration (its bytes are left out).
    pub ech: bool,
}

impl HttpsReport {
    fn of(r: &HttpsRecord) -> Self {
        Self {
            priority: r.priority,
            target: if r.target.is_empty() {
                ".".to_owned()
            } else {
                r.target.clone()
            },
            alpn: r.alpn.iter().map(ToString::to_string).collect(),
            port: r.port,
            hints: (r.ipv6hint.iter().map(|&a| IpAddr::V6(a)))
                .chain(r.ipv4hint.iter().map(|&a| IpAddr::V4(a)))
                .collect(),
            ech: r.ech.is_some(),
        }
    }
}

impl fmt::Display for HttpsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.priority, self.target)?;
        if !self.alpn.is_empty() {
            write!(f, " alpn={}", self.alpn.join(","))?;
        }
        if let Some(port) = self.port {
            write!(f, " port={port}")?;
        }
        if !self.hints.is_empty() {
            f.write_str(" hints=")?;
            for (i, h) in self.hints.iter().enumerate() {
                write!(f, "{}{h}", if i > 0 { "," } else { "" })?;
            }
        }
        if self.ech {
            f.write_str(" ech")?;
        }
        Ok(())
    }
}

/// One attempt of a race.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttemptReport {
    /// The attempt's id (unique within the race; ids grow in start order).
    pub id: u32,
    /// Where its socket connected.
    pub route: SocketAddr,
    /// The route's address family.
    #[serde(serialize_with = "json::family")]
    pub family: Family,
    /// What it connected over: TCP (then perhaps a tunnel and TLS), or QUIC (one handshake,
    /// TLS inside it, HEv3 §6.1).
    #[serde(serialize_with = "json::display")]
    pub transport: TransportKind,
    /// Its steps, e.g. `tcp [2001:db8::1]:443 → tls example.com [h2, http/1.1]`.
    pub plan: String,
    /// Whether its plan has a TLS step.
    pub tls: bool,
    /// Which of the connector's TLS configurations it used (0: the first; see
    /// `ConnectorBuilder::tls_fallback`), when its plan has TLS.
    pub tls_config: Option<usize>,
    /// The proxy it went through (`http proxy host:port`, `socks5 proxy host:port`; never
    /// credentials): its `route` is then the proxy's address.
    pub proxy: Option<String>,
    /// When it started, since the race started.
    #[serde(rename = "started_ms", serialize_with = "json::millis")]
    pub started: Duration,
    /// When its TCP handshake finished, if it did.
    #[serde(rename = "tcp_connected_ms", serialize_with = "json::opt_millis")]
    pub tcp_connected: Option<Duration>,
    /// When it ended, if it did.
    #[serde(rename = "ended_ms", serialize_with = "json::opt_millis")]
    pub ended: Option<Duration>,
    /// How it ended, or the step it is in.
    pub outcome: AttemptOutcome,
}

impl AttemptReport {
    /// How long it ran: from its start to its end, or to the end of the race if it was still
    /// in flight then.
    pub fn duration(&self, race: &RaceReport) -> Duration {
        self.ended
            .unwrap_or(race.elapsed)
            .saturating_sub(self.started)
    }
}

/// How an attempt ended.
///
/// In JSON, an object whose `status` is `in_flight`, `won`, `failed`, `followed_up` or
/// `cancelled`, with the details of that status beside it (see `docs/report-json.md`).
#[derive(Clone, Debug, PartialEq)]
pub enum AttemptOutcome {
    /// Still running when the race ended, in this step.
    InFlight(Phase),
    /// It won the race.
    Won,
    /// It failed. The error keeps the OS or TLS error as its `source()`.
    Failed(AttemptError),
    /// It asked for a follow-up plan instead of finishing (not an error).
    FollowedUp,
    /// The race stopped it, in this step.
    Cancelled {
        /// Why.
        reason: CancelReason,
        /// The step it was in.
        phase: Phase,
    },
}

impl AttemptOutcome {
    fn of(state: &AttemptState) -> Self {
        match state {
            AttemptState::Connecting => Self::InFlight(Phase::Tcp),
            AttemptState::Tunneling => Self::InFlight(Phase::Tunnel),
            AttemptState::Securing | AttemptState::Held => Self::InFlight(Phase::Tls),
            AttemptState::Won => Self::Won,
            AttemptState::Failed(e) => Self::Failed(e.clone()),
            AttemptState::FollowedUp => Self::FollowedUp,
            AttemptState::Cancelled { reason, error } => Self::Cancelled {
                reason: *reason,
                phase: error.phase,
            },
        }
    }

    /// Whether it won.
    pub fn is_won(&self) -> bool {
        matches!(self, Self::Won)
    }

    /// The name of its status, as in JSON: `in_flight`, `won`, `failed`, `followed_up` or
    /// `cancelled`.
    pub fn status(&self) -> &'static str {
        match self {
            Self::InFlight(_) => "in_flight",
            Self::Won => "won",
            Self::Failed(_) => "failed",
            Self::FollowedUp => "followed_up",
            Self::Cancelled { .. } => "cancelled",
        }
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InFlight(phase) => write!(f, "in flight ({phase})"),
            Self::Won => f.write_str("won"),
            Self::Failed(e) => write!(f, "failed: {e}"),
            Self::FollowedUp => f.write_str("followed up"),
            Self::Cancelled { reason, phase } => write!(f, "cancelled: {reason} (in {phase})"),
        }
    }
}

impl Serialize for AttemptOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("status", self.status())?;
        match self {
            Self::InFlight(phase) => map.serialize_entry("phase", &phase.to_string())?,
            Self::Won | Self::FollowedUp => {}
            Self::Failed(e) => {
                map.serialize_entry("kind", json::kind_name(e.kind))?;
                map.serialize_entry("phase", &e.phase.to_string())?;
                map.serialize_entry("detail", &e.detail)?;
            }
            Self::Cancelled { reason, phase } => {
                map.serialize_entry("reason", json::reason_name(*reason))?;
                map.serialize_entry("phase", &phase.to_string())?;
            }
        }
        map.end()
    }
}

/// Where the time of a won race went, for the winner's route.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct Breakdown {
    /// From the start of the race to the first DNS answer with addresses (zero for an IP
    /// literal).
    pub dns: Duration,
    /// From there to the winning attempt's start: the Resolution Delay, the staggering and
    /// the attempts that came before it.
    pub waiting: Duration,
    /// The winner's TCP handshake (zero for a QUIC winner).
    pub tcp: Duration,
    /// The winner's TLS handshake (zero without TLS); for a QUIC winner its one handshake,
    /// which carries TLS.
    pub tls: Duration,
}

impl RaceReport {
    /// Attempts started. Each opened exactly one socket.
    pub fn attempts_started(&self) -> usize {
        self.attempts.len()
    }

    /// The winning attempt, if any.
    pub fn winning_attempt(&self) -> Option<&AttemptReport> {
        let id = self.winner?;
        self.attempts.iter().find(|a| a.id == id)
    }

    /// Where the time went, if an attempt of this race won.
    pub fn breakdown(&self) -> Option<Breakdown> {
        let won = self.winning_attempt()?;
        let end = won.ended.unwrap_or(self.elapsed);
        let tcp_end = match won.transport {
            TransportKind::Tcp => won.tcp_connected.unwrap_or(end),
            TransportKind::Quic => won.started,
        };
        let dns = self
            .queries
            .iter()
            .filter(|q| match &q.answer {
                Some(AnswerReport::Addresses(a)) => !a.is_empty(),
                Some(AnswerReport::Https(r)) => r.iter().any(|r| !r.hints.is_empty()),
                _ => false,
            })
            .filter_map(|q| q.answered)
            .min()
            .unwrap_or_default()
            .min(won.started);
        Some(Breakdown {
            dns,
            waiting: won.started - dns,
            tcp: tcp_end.saturating_sub(won.started),
            tls: end.saturating_sub(tcp_end),
        })
    }

    /// The report as one JSON object (schema: `docs/report-json.md`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub(crate) fn attempts_from(records: &[AttemptRecord], t0: Instant) -> Vec<AttemptReport> {
        records
            .iter()
            .map(|r| AttemptReport {
                id: r.id.get(),
                route: r.plan.route.target,
                family: Family::of(r.plan.route.target.ip()),
                transport: r.plan.transport,
                plan: r.plan.to_string(),
                tls: r.plan.tls.is_some(),
                tls_config: r.plan.tls.as_ref().map(|t| t.config),
                proxy: r.plan.route.proxy.as_ref().map(ToString::to_string),
                started: since(r.started, t0),
                tcp_connected: r.tcp_connected.map(|t| since(t, t0)),
                ended: r.ended.map(|t| since(t, t0)),
                outcome: AttemptOutcome::of(&r.state),
            })
            .collect()
    }
}

/// What a race recorded, kept without formatting anything; a [`RaceReport`] is made from it
/// only when someone asks. Formatting addresses and plans for every connect would cost more
/// than the race itself.
///
/// A linked race hands one over with a pooled connection ([`crate::link::Raced::Pooled`]),
/// and [`crate::Connection::into_story`] takes a connection apart into its stream and story.
#[derive(Debug)]
pub struct Story(pub(crate) Box<RaceCell>);

/// A race in its own allocation, with what the driver notes beside it
/// ([`FastFallbackExchangeFinder::boxed_with`]): one allocation per race, and a story (so a
/// connection) moves one pointer. The race holds the origin, every attempt, the winner and
/// its ALPN, and when it ended, so nothing is copied out of it; its start
/// ([`FastFallbackExchangeFinder::started`]) is the report's time zero.
pub(crate) type RaceCell = WithDriver<Notes>;

/// What the driver notes beside a race: its queries as sent and answered, and its report
/// once someone asked for it.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    pub(crate) queries: Vec<QueryLog>,
    /// Formatted on first use: a connect that nobody asks about never pays for it. Boxed, so
    /// that the race's allocation stays within glibc's small chunks.
    report: OnceLock<Box<RaceReport>>,
}

/// One DNS query as sent and answered, and while it is in flight, the answer it waits for:
/// the race keeps one list of its queries.
pub(crate) struct QueryLog {
    pub(crate) query: Query,
    pub(crate) sent: Instant,
    pub(crate) answered: Option<(Instant, DnsAnswer)>,
    /// The answer in flight: `None` once it came, was cancelled, or went on to the DNS tail
    /// when the race ended (a story never holds one). In a `Mutex` only so that the race
    /// and its story stay `Sync` (a resolver's future need not be): it is reached through
    /// `get_mut`, never locked.
    pub(crate) pending: Option<std::sync::Mutex<crate::Answer>>,
}

impl fmt::Debug for QueryLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryLog")
            .field("query", &self.query)
            .field("sent", &self.sent)
            .field("answered", &self.answered)
            .field("pending", &self.pending.is_some())
            .finish()
    }
}

impl Story {
    /// The race the story is about.
    fn race(&self) -> &FastFallbackExchangeFinder {
        &self.0.race
    }

    /// The address the winning attempt connected to: the unspecified address for a race that
    /// no attempt of its own won (a connection always has its winning attempt).
    pub fn peer(&self) -> SocketAddr {
        match self.winner() {
            Some(Winner::Attempt(id)) => self.race().attempt(id).map(|a| a.plan.route.target),
            _ => None,
        }
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// How the race ended well: its winning attempt, or the pooled connection it took.
    pub fn winner(&self) -> Option<Winner> {
        match self.race().phase() {
            RacePhase::Won { winner, .. } => Some(winner),
            _ => None,
        }
    }

    /// The protocol the winner negotiated: the race's record of its winning attempt holds it.
    pub fn alpn(&self) -> Option<&Alpn> {
        match self.winner()? {
            Winner::Attempt(id) => self.race().attempt(id)?.alpn.as_ref(),
            Winner::Pooled(_) => None,
        }
    }

    /// The report of a race that did not fail, formatted the first time it is asked for and
    /// kept with the story.
    pub fn report(&self) -> &RaceReport {
        self.0.driver.report.get_or_init(|| Box::new(self.render()))
    }

    /// The report, taken out of the story.
    pub fn into_report(mut self) -> RaceReport {
        match self.0.driver.report.take() {
            Some(report) => *report,
            None => self.render(),
        }
    }

    /// The report, formatted now (a failure's adds its error).
    pub(crate) fn render(&self) -> RaceReport {
        let (race, queries) = (self.race(), &self.0.driver.queries);
        let winner = self.winner();
        let t0 = race.started();
        RaceReport {
            origin: race.address().to_string(),
            // The race was handed nothing after it ended: its latest instant is its end.
            elapsed: since(race.latest_instant(), t0),
            queries: queries
                .iter()
                .map(|q| {
                    let answer = q.answered.as_ref().map(|(_, a)| AnswerReport::of(a));
                    QueryReport {
                        kind: q.query.kind,
                        name: match &q.query.name {
                            QueryName::Origin => None,
                            QueryName::Target(n) => Some(n.to_string()),
                        },
                        sent: since(q.sent, t0),
                        answered: q.answered.as_ref().map(|(t, _)| since(*t, t0)),
                        unlisted: answer.as_ref().map_or(0, |(_, n)| *n),
                        answer: answer.map(|(a, _)| a),
                    }
                })
                .collect(),
            attempts: RaceReport::attempts_from(race.attempts(), t0),
            winner: match winner {
                Some(Winner::Attempt(id)) => Some(id.get()),
                _ => None,
            },
            pooled: match winner {
                Some(Winner::Pooled(id)) => Some(id.0),
                _ => None,
            },
            alpn: self.alpn().cloned(),
            error: None,
        }
    }
}

/// The time from `t0` to `t`.
pub(crate) fn since(t: Instant, t0: Instant) -> Duration {
    t.saturating_duration_since(t0)
}

/// Milliseconds, to the microsecond, as reports print them.
fn ms(d: Duration) -> f64 {
    d.as_micros() as f64 / 1e3
}

impl fmt::Display for RaceReport {
    /// A plain timeline: one line per query and attempt, then the verdict. (The CLI draws the
    /// same report as a waterfall with bars.) What the network chose (names, ALPN ids, error
    /// texts) is shown with its control characters escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::shown::escaped;
        writeln!(f, "race to {}", escaped(&self.origin))?;
        for q in &self.queries {
            let what = match &q.name {
                Some(name) => format!("{} {}", q.kind, escaped(name)),
                None => q.kind.to_string(),
            };
            let a = q
                .answer
                .as_ref()
                .map(|a| escaped(&a.to_string()).into_owned());
            write!(f, "  {:>8.1} ms  query {what:<5}", ms(q.sent))?;
            match (&q.answered, a) {
                (Some(t), Some(a)) if q.unlisted > 0 => {
                    writeln!(f, " → {:.1} ms: {a}, and {} more", ms(*t), q.unlisted)?;
                }
                (Some(t), Some(a)) => writeln!(f, " → {:.1} ms: {a}", ms(*t))?,
                _ => writeln!(f, " → no answer before the race ended")?,
            }
        }
        for a in &self.attempts {
            write!(
                f,
                "  {:>8.1} ms  #{} {}",
                ms(a.started),
                a.id,
                escaped(&a.plan)
            )?;
            if let Some(t) = a.tcp_connected {
                write!(f, "; tcp at {:.1} ms", ms(t))?;
            }
            let outcome = a.outcome.to_string();
            match a.ended {
                Some(t) => writeln!(f, "; {} at {:.1} ms", escaped(&outcome), ms(t))?,
                None => writeln!(f, "; {}", escaped(&outcome))?,
            }
        }
        let elapsed = ms(self.elapsed);
        if let Some(id) = self.pooled {
            return write!(f, "ended on pooled connection {id} after {elapsed:.1} ms");
        }
        match (&self.winner, &self.error) {
            (Some(id), _) => {
                write!(f, "won by #{id} after {elapsed:.1} ms")?;
                if let Some(alpn) = &self.alpn {
                    write!(f, " (ALPN {})", escaped(&alpn.to_string()))?;
                }
                Ok(())
            }
            (None, Some(e)) => write!(f, "failed after {elapsed:.1} ms: {}", escaped(&e.message)),
            (None, None) => write!(f, "unfinished after {elapsed:.1} ms"),
        }
    }
}

/// How report values are written in JSON (`docs/report-json.md`).
mod json {
    use std::fmt::Display;
    use std::time::Duration;

    use fastfallback_proto::{AttemptErrorKind, CancelReason, Family};
    use serde::Serializer;

    pub(super) fn millis<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(super::ms(*d))
    }

    pub(super) fn opt_millis<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => millis(d, s),
            None => s.serialize_none(),
        }
    }

    pub(super) fn display<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub(super) fn opt_display<T: Display, S: Serializer>(
        v: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub(super) fn family<S: Serializer>(f: &Family, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match f {
            Family::V6 => "v6",
            Family::V4 => "v4",
        })
    }

    pub(super) fn kind_name(kind: AttemptErrorKind) -> &'static str {
        match kind {
            AttemptErrorKind::Refused => "refused",
            AttemptErrorKind::Unreachable => "unreachable",
            AttemptErrorKind::TimedOut => "timed_out",
            AttemptErrorKind::Reset => "reset",
            AttemptErrorKind::Tls => "tls",
            AttemptErrorKind::AlpnMismatch => "alpn_mismatch",
            AttemptErrorKind::Cancelled => "cancelled",
            AttemptErrorKind::Io => "io",
            // A kind added to the (non-exhaustive) enum later: named here before it ships.
            _ => "other",
        }
    }

    pub(super) fn reason_name(reason: CancelReason) -> &'static str {
        match reason {
            CancelReason::LostRace => "lost_race",
            CancelReason::Overtaken => "overtaken",
            CancelReason::AttemptTimeout => "attempt_timeout",
            CancelReason::Deadline => "deadline",
            CancelReason::Evicted => "evicted",
            CancelReason::Abandoned => "abandoned",
            CancelReason::Withdrawn => "withdrawn",
        }
    }
}

mod error;
#[cfg(test)]
mod tests;

pub use error::ReportError;
