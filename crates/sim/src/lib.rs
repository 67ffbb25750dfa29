//! # fastfallback-sim
//!
//! A deterministic, scripted network on virtual time that drives the real
//! [`FastFallbackExchangeFinder`]. It is the harness behind the conformance tests, the
//! benchmarks of the race core, the CLI demo and the fuzz targets.
//!
//! A [`Scenario`] says when each DNS answer arrives and how each address behaves (connects after
//! `r` ms, refuses, is unreachable, drops every packet, fails TLS, asks for a follow-up plan).
//! [`Scenario::run`] plays it with exact times and returns a [`Run`]: the ordered event log
//! (standards §0.2), the result, and counters (peak attempts in flight, sockets left open).
//!
//! ```
//! use fastfallback_sim::Scenario;
//!
//! // T11: IPv6 blackholed, IPv4 answers in 20 ms.
//! let run = Scenario::plain()
//!     .aaaa(10, &["2001:db8::a"])
//!     .a(10, &["192.0.2.1"])
//!     .drop("2001:db8::a")
//!     .ok("192.0.2.1", 20)
//!     .run();
//! assert_eq!(run.starts(), [("2001:db8::a".into(), 10), ("192.0.2.1".into(), 260)]);
//! assert_eq!(run.won(), Some(("192.0.2.1".into(), 280)));
//! assert_eq!(run.cancelled(), [("2001:db8::a".into(), 280)]);
//! ```

#![forbid(unsafe_code)]

mod run;
mod scenario;

pub use run::{Event, Player, Run, run_together};
pub use scenario::{Behaviour, Scenario};

pub use fastfallback_plan::FastFallbackExchangeFinder;
