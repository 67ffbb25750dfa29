//! # fastfallback-testkit
//!
//! Scaffolding that the integration tests of `fastfallback-net` and `fastfallback-http` share,
//! so that each helper exists once: [`wire`] for tests on a real test network, [`loopback`]
//! for servers, listeners and closed ports on 127.0.0.1, [`resolver`] for a fake resolver
//! with canned answers, [`udp`] for a UDP port that never answers and a UDP relay that
//! counts the 0-RTT packets it passes on, [`tickets`] for a TLS
//! session store that says when a ticket arrives, [`Millis`] for reading report durations.

pub mod loopback;
pub mod resolver;
pub mod tickets;
pub mod udp;
pub mod wire;

use std::time::Duration;

/// A duration as fractional milliseconds, for tolerance checks.
pub trait Millis {
    /// The value in ms.
    fn ms(&self) -> f64;
}

impl Millis for Duration {
    fn ms(&self) -> f64 {
        self.as_secs_f64() * 1e3
    }
}
