//! Why a connector could not be built ([`BuildError`]) or a connect failed ([`ConnectError`]).

use std::fmt;
use std::io;

use fastfallback_plan::PolicyError;
use fastfallback_proto::RaceError;
use fastfallback_route::AddressError;

use crate::{RaceReport, ResolverError};

/// Why a [`Connector`](crate::Connector) could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The policy is invalid.
    Policy(PolicyError),
    /// The system DNS configuration could not be read.
    Resolver(ResolverError),
    /// The TLS configuration was rejected.
    Tls(rustls::Error),
    /// The ALPN settings cannot be met: ids the engine does not speak, or a policy and a TLS
    /// configuration that disagree.
    Alpn(String),
    /// The route-memory file's path cannot be used: its directory is missing or cannot be
    /// written, it is not a regular file (a FIFO, a device, a directory), or it cannot be
    /// read. (A file that is merely corrupt is not an error: it is ignored with a warning and
    /// replaced.)
    MemoryFile(io::Error),
    /// The policy asks for something this build cannot do: QUIC attempts
    /// ([`fastfallback_plan::FallbackPolicy::quic`]) without the `quic` feature.
    Unsupported(&'static str),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Policy(e) => write!(f, "invalid policy: {e}"),
            Self::Resolver(e) => write!(f, "{e}"),
            Self::Tls(e) => write!(f, "invalid TLS configuration: {e}"),
            Self::Alpn(e) => write!(f, "ALPN: {e}"),
            Self::MemoryFile(e) => write!(f, "route-memory file {e}"),
            Self::Unsupported(what) => write!(f, "not supported by this driver: {what}"),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Policy(e) => Some(e),
            Self::Resolver(e) => Some(e),
            Self::Tls(e) => Some(e),
            Self::MemoryFile(e) => Some(e),
            Self::Alpn(_) | Self::Unsupported(_) => None,
        }
    }
}

/// Why a connect failed. Race failures carry the full report.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The origin is not a valid address (bad name, port 0, unsupported scheme…).
    InvalidAddress(AddressError),
    /// The race ran and lost: every cause is inside, in start order.
    Race(Box<RaceFailure>),
    /// Something this driver does not do (named).
    Unsupported(&'static str),
    /// One of the driver's own invariants broke (named): a bug in this crate, not a network
    /// or input problem. Please report it.
    Internal(&'static str),
}

/// A lost race: why, and everything that happened.
#[derive(Clone, Debug)]
pub struct RaceFailure {
    /// Why the race failed, with every attempt's cause.
    pub error: RaceError,
    /// The race's report.
    pub report: RaceReport,
    /// When the connector fails over across proxies: the races through the proxies tried
    /// before this one, in order.
    pub earlier: Vec<Self>,
}

impl ConnectError {
    /// The race's report, if a race ran.
    pub fn report(&self) -> Option<&RaceReport> {
        match self {
            Self::Race(r) => Some(&r.report),
            _ => None,
        }
    }

    /// The race error, if a race ran.
    pub fn race_error(&self) -> Option<&RaceError> {
        match self {
            Self::Race(r) => Some(&r.error),
            _ => None,
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidAddress(e) => write!(f, "invalid origin: {e}"),
            Self::Race(r) => {
                write!(f, "cannot connect to {}: {}", r.report.origin, r.error)?;
                for (i, earlier) in r.earlier.iter().enumerate() {
                    let through = earlier
                        .report
                        .attempts
                        .first()
                        .and_then(|a| a.proxy.as_deref())
                        .unwrap_or("an earlier proxy");
                    write!(
                        f,
                        "; before that, through {through} (proxy {}): {}",
                        i + 1,
                        earlier.error.kind
                    )?;
                }
                Ok(())
            }
            Self::Unsupported(what) => write!(f, "not supported by this driver yet: {what}"),
            Self::Internal(what) => write!(
                f,
                "internal error in fastfallback (a bug, please report it): {what}"
            ),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidAddress(e) => Some(e),
            Self::Race(r) => Some(&r.error),
            Self::Unsupported(_) | Self::Internal(_) => None,
        }
    }
}

impl From<ConnectError> for io::Error {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::Race(r) => Self::from(r.error),
            ConnectError::InvalidAddress(a) => Self::new(io::ErrorKind::InvalidInput, a),
            ConnectError::Unsupported(_) => Self::new(io::ErrorKind::Unsupported, e),
            ConnectError::Internal(_) => Self::other(e),
        }
    }
}
