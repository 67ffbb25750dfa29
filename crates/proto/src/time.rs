//! The race's clock: an [`Instant`] is a duration since an epoch the driver picks.

use std::fmt;
use std::num::NonZeroU64;
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
/// Stored as nanoseconds since the epoch plus one, in a `NonZeroU64`: eight bytes, and
/// `Option<Instant>` is eight bytes too. That spans 584 years; later instants saturate.
#[derive(Clone, Copy, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct Instant(NonZeroU64);

/// Whole nanoseconds in `d`, saturating at `u64::MAX`.
#[inline]
const fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(d.subsec_nanos() as u64)
}

impl Instant {
    /// The epoch itself.
    pub const ZERO: Self = Self(NonZeroU64::MIN);

    #[inline]
    const fn from_nanos(n: u64) -> Self {
        match NonZeroU64::new(n.saturating_add(1)) {
            Some(v) => Self(v),
            None => Self(NonZeroU64::MAX),
        }
    }

    #[inline]
    const fn nanos(self) -> u64 {
        self.0.get() - 1
    }

    /// The instant `elapsed` after the epoch.
    #[inline]
    pub const fn from_elapsed(elapsed: Duration) -> Self {
        Self::from_nanos(nanos(elapsed))
    }

    /// The instant `ms` milliseconds after the epoch.
    #[inline]
    pub const fn from_millis(ms: u64) -> Self {
        Self::from_nanos(ms.saturating_mul(1_000_000))
    }

    /// Time since the epoch.
    #[inline]
    pub const fn elapsed(self) -> Duration {
        Duration::from_nanos(self.nanos())
    }

    /// Whole milliseconds since the epoch.
    #[inline]
    pub const fn as_millis(self) -> u64 {
        self.nanos() / 1_000_000
    }

    /// `self - earlier`, or zero when `earlier` is later.
    #[inline]
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.get().saturating_sub(earlier.0.get()))
    }

    /// `self + d`, or `None` on overflow.
    #[inline]
    pub fn checked_add(self, d: Duration) -> Option<Self> {
        let n = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(n).map(Self)
    }

    /// `self - d`, or `None` when that would be before the epoch.
    #[inline]
    pub fn checked_sub(self, d: Duration) -> Option<Self> {
        let n = u64::try_from(d.as_nanos()).ok()?;
        self.nanos().checked_sub(n).map(Self::from_nanos)
    }
}

impl Default for Instant {
    #[inline]
    fn default() -> Self {
        Self::ZERO
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Instant").field(&self.elapsed()).finish()
    }
}

impl Add<Duration> for Instant {
    type Output = Self;

    /// Saturates instead of overflowing: a far-future deadline stays far in the future.
    #[inline]
    fn add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(nanos(d)))
    }
}

impl AddAssign<Duration> for Instant {
    #[inline]
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub for Instant {
    type Output = Duration;

    /// Saturates at zero.
    #[inline]
    fn sub(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.nanos() / 1000;
        if us.is_multiple_of(1000) {
            write!(f, "{}ms", us / 1000)
        } else {
            write!(f, "{}.{:03}ms", us / 1000, us % 1000)
        }
    }
}
