//! # fastfallback-plan
//!
//! The race itself, as a deterministic sans-IO state machine.
//!
//! - [`FallbackPolicy`]: every knob, with defaults from the standards, built through a builder
//!   that rejects invalid values.
//! - [`ConnectPlan`]: the steps of one attempt on one route (TCP, optional tunnel, TLS + ALPN).
//! - [`FastFallbackExchangeFinder`]: takes DNS answers, attempt progress, pooled connections and
//!   time; yields queries to send, attempts to start and cancel, and the result.
//! - [`tls_follow_up`]: the plan that follows a failed TLS handshake (the next TLS
//!   configuration, or the ECH retry), from what the failure means ([`TlsFailure`]).
//!
//! The crate never reads a clock, sleeps, opens a socket, takes a lock or calls back into its
//! caller. A driver feeds it:
//!
//! ```text
//!  loop {
//!      for each event that happened:   finder.handle_dns / handle_attempt / handle_pooled(.., now)
//!      if finder.poll_timeout() <= now: finder.handle_timeout(now)
//!      while let Some(out) = finder.poll_output(now) { act on it }
//!      sleep until finder.poll_timeout(), or until the next event
//!  }
//!  apply finder.drain_lessons() to the shared route memory
//! ```
//!
//! See `crates/sim` for a scripted driver on virtual time, and `docs/architecture.md`.

#![forbid(unsafe_code)]

mod answers;
mod attempt;
mod finder;
mod follow_up;
mod plan;
mod policy;
mod policy_text;
mod timer;
mod transition;

pub use attempt::{AttemptRecord, AttemptState};
pub use fastfallback_route::order::FamilyPreference;
pub use finder::{Attempts, FastFallbackExchangeFinder, RaceInput, RacePhase, WithDriver};
pub use follow_up::{TlsFailure, ech_retry, next_tls_config, tls_follow_up};
pub use plan::{ConnectPlan, TlsStep};
pub use policy::{
    FallbackPolicy, FallbackPolicyBuilder, HARD_MIN_ATTEMPT_DELAY, MAX_MEMORY_TTL, PolicyError,
    PoolPolicy, QuicOrder, SpareWinners, StartFloor, WinAt,
};
pub use policy_text::POLICY_KEYS;
pub use timer::Timer;
