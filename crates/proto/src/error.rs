//! Why attempts and races fail. Racing keeps every cause.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::{AttemptId, DnsError, Family, Instant, Query};

/// The step of a connect plan an attempt was in when it ended.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum Phase {
    /// The TCP handshake.
    Tcp,
    /// A proxy tunnel (HTTP CONNECT).
    Tunnel,
    /// The TLS handshake, certificate check included.
    Tls,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tcp => "tcp",
            Self::Tunnel => "tunnel",
            Self::Tls => "tls",
        })
    }
}

/// What kind of failure ended an attempt.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
#[non_exhaustive]
pub enum AttemptErrorKind {
    /// The peer refused the connection (RST to the SYN, `ECONNREFUSED`).
    Refused,
    /// No route to the destination (`ENETUNREACH`, `EHOSTUNREACH`, an ICMP unreachable).
    Unreachable,
    /// The attempt's own time limit passed.
    TimedOut,
    /// The connection was reset after it was established.
    Reset,
    /// The TLS handshake failed: bad certificate, wrong host, expired, protocol error.
    Tls,
    /// The server's ALPN choice is not one we offered or can speak.
    AlpnMismatch,
    /// The attempt was stopped by the race (it lost, the caller gave up, or it was evicted to
    /// make room for a later attempt).
    Cancelled,
    /// Another I/O error.
    Io,
}

impl AttemptErrorKind {
    /// How much this kind of failure tells a user, higher first. A TLS or ALPN failure explains
    /// more than a refused port, which explains more than a timeout. Used to pick the primary
    /// cause of a failed race deterministically (OkHttp's primary error depends on timing).
    pub fn informativeness(self) -> u8 {
        match self {
            Self::Tls | Self::AlpnMismatch => 5,
            Self::Reset => 4,
            Self::Refused => 3,
            Self::Unreachable => 2,
            Self::Io => 2,
            Self::TimedOut => 1,
            Self::Cancelled => 0,
        }
    }

    /// Whether the failure says something about the network path (so the address family's
    /// health should hear of it), as opposed to one server's state.
    pub fn is_path_failure(self) -> bool {
        matches!(self, Self::Unreachable | Self::TimedOut)
    }
}

impl fmt::Display for AttemptErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Refused => "connection refused",
            Self::Unreachable => "destination unreachable",
            Self::TimedOut => "timed out",
            Self::Reset => "connection reset",
            Self::Tls => "tls handshake failed",
            Self::AlpnMismatch => "alpn mismatch",
            Self::Cancelled => "cancelled",
            Self::Io => "i/o error",
        })
    }
}

/// Why one attempt failed.
///
/// Besides the kind, phase and detail, a driver may attach what it saw: the OS error's
/// [`io::ErrorKind`](std::io::ErrorKind) ([`Self::io_kind`]) and the underlying error (a
/// `rustls::Error`, an `io::Error`) as [`std::error::Error::source`], so callers can match
/// on it. Equality compares kind, phase, detail and the I/O kind, not the source.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AttemptError {
    /// What kind of failure.
    pub kind: AttemptErrorKind,
    /// The step the attempt was in.
    pub phase: Phase,
    /// A human-readable detail, for example the OS error or the TLS alert.
    pub detail: String,
    io_kind: Option<std::io::ErrorKind>,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl PartialEq for AttemptError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.phase == other.phase
            && self.detail == other.detail
            && self.io_kind == other.io_kind
    }
}

impl Eq for AttemptError {}

impl AttemptError {
    /// An error of `kind` in `phase`, with a detail message.
    pub fn new(kind: AttemptErrorKind, phase: Phase, detail: impl Into<String>) -> Self {
        Self {
            kind,
            phase,
            detail: detail.into(),
            io_kind: None,
            source: None,
        }
    }

    /// The same error, with the OS error's kind it came from.
    #[must_use]
    pub fn with_io_kind(mut self, kind: std::io::ErrorKind) -> Self {
        self.io_kind = Some(kind);
        self
    }

    /// The same error, with the error underneath (returned by `source()`).
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }

    /// The kind of the OS error this came from, if it came from one.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        self.io_kind
    }

    /// A TCP-phase error with no further detail.
    pub fn tcp(kind: AttemptErrorKind) -> Self {
        Self::new(kind, Phase::Tcp, "")
    }
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} during {}", self.kind, self.phase)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for AttemptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// One attempt of a failed race and why it failed.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct AttemptFailure {
    /// The attempt.
    pub id: AttemptId,
    /// Where it connected to.
    pub addr: SocketAddr,
    /// When it started.
    pub started: Instant,
    /// How long it ran.
    pub elapsed: Duration,
    /// Why it ended.
    pub error: AttemptError,
}

/// Why a whole race failed.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
#[non_exhaustive]
pub enum RaceErrorKind {
    /// DNS gave no usable address (every answer negative, or every address unusable).
    NoAddresses,
    /// Every attempt failed.
    AllAttemptsFailed,
    /// The overall connect deadline passed.
    TimedOut,
    /// Every address is of a family this host has no route for (for example an IPv6 literal
    /// on an IPv4-only host). Nothing was attempted.
    NetworkUnreachable(Family),
    /// The HTTPS query failed (SERVFAIL, a timeout, a transport error) over a resolver the
    /// caller marked as cryptographically protected: the connection is abandoned rather than
    /// made without the records, which would invite a downgrade (HEv3 §6.3 R-38; RFC 9460
    /// §3.1). Nothing was sent past TCP.
    SvcbResolutionFailed,
}

impl fmt::Display for RaceErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoAddresses => f.write_str("no usable addresses"),
            Self::AllAttemptsFailed => f.write_str("every connection attempt failed"),
            Self::TimedOut => f.write_str("connect deadline exceeded"),
            Self::NetworkUnreachable(family) => {
                write!(f, "network unreachable: this host has no {family} route")
            }
            Self::SvcbResolutionFailed => f.write_str(
                "HTTPS record resolution failed over protected DNS; not connecting without it",
            ),
        }
    }
}

/// Why a race failed, with every cause: each attempt's error in start order, and each DNS
/// failure (reference profile P8). The order never depends on which failure finished first.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct RaceError {
    /// The reason the race ended.
    pub kind: RaceErrorKind,
    /// Every attempt, in start order, with its cause.
    pub attempts: Vec<AttemptFailure>,
    /// Every DNS query that failed or came back empty, in the order the answers arrived.
    pub dns: Vec<(Query, Option<DnsError>)>,
    /// Addresses that were skipped before any attempt, with the reason (for example a multicast
    /// address in an AAAA answer): the first few only, so an answer of 100 000 addresses does
    /// not make an error of megabytes.
    pub skipped: Vec<(String, String)>,
    /// How many more were skipped than `skipped` lists (a `u32`, which fits where the race's
    /// output queue had padding: the finder's size counts).
    pub skipped_more: u32,
}

/// The most attempts [`RaceError`]'s text lists one by one; it counts the rest.
pub const MAX_ATTEMPTS_LISTED: usize = 16;

impl RaceError {
    /// The most informative attempt failure: the attempt that got furthest (a failure in TLS
    /// over one in a proxy tunnel over one in TCP, so an IPv4 attempt that stalled in TLS
    /// tells more than an IPv6 one refused at the SYN), then the highest
    /// [`AttemptErrorKind::informativeness`], ties broken by start order; an attempt the race
    /// cancelled comes last, however far it got. Deterministic.
    pub fn primary(&self) -> Option<&AttemptFailure> {
        fn reach(phase: Phase) -> u8 {
            match phase {
                Phase::Tcp => 0,
                Phase::Tunnel => 1,
                Phase::Tls => 2,
            }
        }
        self.attempts
            .iter()
            .enumerate()
            .max_by_key(|(i, a)| {
                let kind = a.error.kind;
                (
                    kind != AttemptErrorKind::Cancelled,
                    reach(a.error.phase),
                    kind.informativeness(),
                    std::cmp::Reverse(*i),
                )
            })
            .map(|(_, a)| a)
    }
}

impl fmt::Display for RaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        let primary = self.primary();
        if let Some(p) = primary {
            write!(
                f,
                "; most telling: attempt {} to {}: {}",
                p.id, p.addr, p.error
            )?;
        }
        // Each cause once: the most telling one is named above (and a lone attempt is all of
        // them).
        if self.attempts.len() > 1 {
            write!(f, " ({} attempts:", self.attempts.len())?;
            for a in self.attempts.iter().take(MAX_ATTEMPTS_LISTED) {
                if primary.is_some_and(|p| p.id == a.id) {
                    write!(f, " [{} {}: above]", a.id, a.addr)?;
                } else {
                    write!(f, " [{} {} {}]", a.id, a.addr, a.error)?;
                }
            }
            if let Some(more) = self.attempts.len().checked_sub(MAX_ATTEMPTS_LISTED)
                && more > 0
            {
                write!(f, " and {more} more")?;
            }
            f.write_str(")")?;
        }
        for (query, err) in &self.dns {
            match err {
                Some(e) => write!(f, "; {query} query: {e}")?,
                None => write!(f, "; {query} query: no records")?,
            }
        }
        for (addr, why) in &self.skipped {
            write!(f, "; skipped {addr}: {why}")?;
        }
        if self.skipped_more > 0 {
            write!(f, "; and {} more skipped", self.skipped_more)?;
        }
        Ok(())
    }
}

impl std::error::Error for RaceError {
    /// The most telling attempt's error ([`Self::primary`]), so a caller can walk down to
    /// what the OS or the TLS stack said.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.primary()
            .map(|a| &a.error as &(dyn std::error::Error + 'static))
    }
}

impl From<RaceError> for std::io::Error {
    fn from(e: RaceError) -> Self {
        let kind = match e.kind {
            RaceErrorKind::TimedOut => std::io::ErrorKind::TimedOut,
            RaceErrorKind::NoAddresses => std::io::ErrorKind::NotFound,
            RaceErrorKind::SvcbResolutionFailed => std::io::ErrorKind::NotFound,
            RaceErrorKind::NetworkUnreachable(_) => std::io::ErrorKind::NetworkUnreachable,
            RaceErrorKind::AllAttemptsFailed => match e.primary().map(|p| p.error.kind) {
                Some(AttemptErrorKind::Refused) => std::io::ErrorKind::ConnectionRefused,
                Some(AttemptErrorKind::Unreachable) => std::io::ErrorKind::HostUnreachable,
                Some(AttemptErrorKind::TimedOut) => std::io::ErrorKind::TimedOut,
                Some(AttemptErrorKind::Reset) => std::io::ErrorKind::ConnectionReset,
                _ => std::io::ErrorKind::Other,
            },
        };
        Self::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(id: u32, kind: AttemptErrorKind, phase: Phase) -> AttemptFailure {
        AttemptFailure {
            id: id_of(id),
            addr: SocketAddr::from(([127, 0, 0, 1], 443)),
            started: Instant::ZERO,
            elapsed: Duration::ZERO,
            error: AttemptError::new(kind, phase, ""),
        }
    }

    fn id_of(n: u32) -> AttemptId {
        (1..n).fold(AttemptId::FIRST, |id, _| id.next().unwrap())
    }

    fn race(attempts: Vec<AttemptFailure>) -> RaceError {
        RaceError {
            kind: RaceErrorKind::AllAttemptsFailed,
            attempts,
            dns: Vec::new(),
            skipped: Vec::new(),
            skipped_more: 0,
        }
    }

    #[test]
    fn the_most_telling_cause_is_the_attempt_that_got_furthest() {
        // IPv6 refused at the SYN; IPv4 connected and then timed out in TLS.
        let err = race(vec![
            failure(1, AttemptErrorKind::Refused, Phase::Tcp),
            failure(2, AttemptErrorKind::TimedOut, Phase::Tls),
        ]);
        assert_eq!(err.primary().unwrap().id, id_of(2));
        let tunnel = race(vec![
            failure(1, AttemptErrorKind::Refused, Phase::Tcp),
            failure(2, AttemptErrorKind::Refused, Phase::Tunnel),
        ]);
        assert_eq!(tunnel.primary().unwrap().id, id_of(2));
        // A cancelled attempt tells nothing, however far it got.
        let err = race(vec![
            failure(1, AttemptErrorKind::Cancelled, Phase::Tls),
            failure(2, AttemptErrorKind::Unreachable, Phase::Tcp),
            failure(3, AttemptErrorKind::Refused, Phase::Tcp),
        ]);
        assert_eq!(err.primary().unwrap().id, id_of(3));
    }

    #[test]
    fn a_race_error_states_each_cause_once() {
        let mut one = race(vec![failure(1, AttemptErrorKind::Refused, Phase::Tcp)]);
        one.attempts[0].error.detail = "the one cause".to_owned();
        let text = one.to_string();
        assert_eq!(text.matches("the one cause").count(), 1, "{text}");
        assert!(!text.contains("attempts:"), "{text}");

        let mut two = race(vec![
            failure(1, AttemptErrorKind::Refused, Phase::Tcp),
            failure(2, AttemptErrorKind::Tls, Phase::Tls),
        ]);
        two.attempts[0].error.detail = "first cause".to_owned();
        two.attempts[1].error.detail = "second cause".to_owned();
        let text = two.to_string();
        assert_eq!(text.matches("second cause").count(), 1, "{text}");
        assert_eq!(text.matches("first cause").count(), 1, "{text}");
        assert!(text.contains("(2 attempts: [#1 127.0.0.1:443 connection refused during tcp: first cause] [#2 127.0.0.1:443: above])"), "{text}");
    }
}
