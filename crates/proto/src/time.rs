//! The race's clock: an [`Instant`] is a duration since an epoch the driver picks.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time on the race's clock.
///
/// The domain crates never read a clock. The driver picks an epoch (for example the moment the
/// process started) and hands every `now` in as the time elapsed since it. Tests use
/// [`Instant::from_millis`] and get exact, repeatable timelines.
///
/// ```
/// use fastfallback_proto::Instant;
/// use std::time::Duration;
///
/// let t = Instant::from_millis(10) + Duration::from_millis(250);
/// assert_eq!(t.as_millis(), 260);
/// ```
#[derive(Clone, Copy, Debug, Default, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct Instant(Duration);

impl Instant {
    /// The epoch itself.
    pub const ZERO: Self = Self(Duration::ZERO);

    /// The instant `elapsed` after the epoch.
    pub const fn from_elapsed(elapsed: Duration) -> Self {
        Self(elapsed)
    }

    /// The instant `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Self(Duration::from_millis(ms))
    }

    /// Time since the epoch.
    pub const fn elapsed(self) -> Duration {
        self.0
    }

    /// Whole milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0.as_millis() as u64
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`, or `None` on overflow.
    pub fn checked_add(self, d: Duration) -> Option<Self> {
        self.0.checked_add(d).map(Self)
    }

    /// `self - d`, or `None` when that would be before the epoch.
    pub fn checked_sub(self, d: Duration) -> Option<Self> {
        self.0.checked_sub(d).map(Self)
    }
}

impl Add<Duration> for Instant {
    type Output = Self;

    /// Saturates instead of overflowing: a far-future deadline stays far in the future.
    fn add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(d))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub for Instant {
    type Output = Duration;

    /// Saturates at zero.
    fn sub(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.as_micros();
        if us.is_multiple_of(1000) {
            write!(f, "{}ms", us / 1000)
        } else {
            write!(f, "{}.{:03}ms", us / 1000, us % 1000)
        }
    }
}
