//! The race clock: one process-wide epoch on tokio's clock (which follows paused time), and
//! readings turned into the race's [`Instant`] only when needed.

use std::sync::OnceLock;
use std::time::Duration;

use fastfallback_plan::MAX_MEMORY_TTL;
use fastfallback_proto::Instant;

/// Route memory may have to express times up to a day before this process started (a memory
/// file written yesterday), so the race clock starts that long before the first connect.
pub(super) const CLOCK_BASE: Duration = MAX_MEMORY_TTL;

/// The clock every race of the process shares, so route memory written by one connector's
/// race can be read by another's.
pub(super) fn epoch() -> tokio::time::Instant {
    static EPOCH: OnceLock<tokio::time::Instant> = OnceLock::new();
    *EPOCH.get_or_init(tokio::time::Instant::now)
}

/// The race clock now: the [`Instant`] the driver hands a race (and a pool's bookkeeping,
/// which shares the clock with its races).
pub fn now() -> Instant {
    race_time(reading())
}

/// A reading of tokio's clock (which follows tokio's paused time). The race clock's epoch is
/// fixed first if it was not yet: a reading turned into the race clock later, by a report,
/// must not come before the epoch, where it would read as the epoch itself.
#[inline]
pub(super) fn reading() -> tokio::time::Instant {
    epoch();
    tokio::time::Instant::now()
}

/// The race clock's instant at the epoch.
const AT_EPOCH: Instant = Instant::from_elapsed(CLOCK_BASE);

/// The race clock's instant for a [`reading`]: the time since the epoch added to a constant
/// in whole nanoseconds (adding the two `Duration`s first would normalise and check both).
#[inline]
pub(crate) fn race_time(reading: tokio::time::Instant) -> Instant {
    AT_EPOCH + reading.saturating_duration_since(epoch())
}

/// One reading of the clock, turned into the race clock's [`Instant`] only when something
/// asks for it, and then once.
///
/// The turning costs about twice the reading (std's `Instant` subtraction), so a wake-up that
/// the race does not need to hear of (the first poll of an attempt that is still pending)
/// never pays for it.
#[derive(Clone, Copy)]
pub(super) struct Moment {
    pub(super) reading: tokio::time::Instant,
    pub(super) at: Option<Instant>,
}

impl Moment {
    /// The clock now.
    pub(super) fn now() -> Self {
        Self::of(reading())
    }

    pub(super) fn of(reading: tokio::time::Instant) -> Self {
        Self { reading, at: None }
    }

    /// The race clock's instant for this reading.
    #[inline]
    pub(super) fn at(&mut self) -> Instant {
        *self.at.get_or_insert_with(|| race_time(self.reading))
    }
}

pub(super) fn tokio_instant(at: Instant) -> tokio::time::Instant {
    epoch() + at.elapsed().saturating_sub(CLOCK_BASE)
}

pub(crate) fn wall_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
