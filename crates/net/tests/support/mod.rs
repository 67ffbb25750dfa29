//! Shared by the integration tests: report durations in milliseconds, for tolerance checks.

use std::time::Duration;

/// A duration as fractional milliseconds.
pub(crate) trait Millis {
    /// The value in ms.
    fn ms(&self) -> f64;
}

impl Millis for Duration {
    fn ms(&self) -> f64 {
        self.as_secs_f64() * 1e3
    }
}
