//! # fastfallback-proto
//!
//! The shared vocabulary of fastfallback. Every other crate speaks in these types:
//!
//! - [`Instant`]: a point on the race's clock. The domain crates never read a clock; the driver
//!   converts its monotonic clock into an [`Instant`] and passes it in.
//! - [`Family`], [`Alpn`], [`Protocol`], [`TransportKind`]: what an endpoint is and what it
//!   speaks; [`parse_alt_svc`]: what a server's `Alt-Svc` field says about other places to
//!   reach it.
//! - [`AttemptId`], [`QueryKind`]: names for attempts and DNS queries.
//! - [`DnsAnswer`], [`AttemptEvent`]: the inputs the driver hands to the race.
//! - [`Output`]: what the race asks the driver to do.
//! - [`AttemptError`], [`RaceError`]: why an attempt or a whole race failed, with every cause kept
//!   in start order.
//!
//! ```text
//!            DnsAnswer, AttemptEvent, pooled offers, now
//!   driver ────────────────────────────────────────────────▶ race (sans-IO)
//!          ◀──────────────────────────────────────────────── Output, next deadline
//!            StartQuery, StartAttempt, CancelAttempt, Done, Failed
//! ```
//!
//! This crate has no dependencies and does no I/O.

#![forbid(unsafe_code)]

mod alpn;
mod alt_svc;
mod dns;
mod error;
mod event;
mod family;
mod hash;
mod id;
mod time;

pub use alpn::{Alpn, AlpnOffer, Protocol, TransportKind};
pub use alt_svc::{AltService, AltSvc, DEFAULT_MAX_AGE, MAX_ALTERNATIVES, parse_alt_svc};
pub use dns::{DnsAnswer, DnsError, HttpsRecord, Query, QueryKind, QueryName};
pub use error::{
    AttemptError, AttemptErrorKind, AttemptFailure, MAX_ATTEMPTS_LISTED, Phase, RaceError,
    RaceErrorKind,
};
pub use event::{AttemptEvent, CancelReason, Output, Winner};
pub use family::Family;
pub use hash::{FxBuildHasher, FxHasher};
pub use id::{AttemptId, PooledId};
pub use time::Instant;
