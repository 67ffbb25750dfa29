//! Ids for attempts and pooled connections.

use std::fmt;
use std::num::NonZeroU32;

/// Names one connection attempt within a race. Opaque: compare ids and print them, but do not
/// read anything into their values. Ids of one race grow in start order, so sorting by id is
/// sorting by start time.
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct AttemptId(NonZeroU32);

impl AttemptId {
    /// The first id a race hands out.
    pub const FIRST: Self = Self(NonZeroU32::MIN);

    /// The id after this one, or `None` when ids are used up (after four billion attempts).
    #[inline]
    pub fn next(self) -> Option<Self> {
        self.0.checked_add(1).map(Self)
    }

    /// A number for reports and logs, unique within a race (it is not an index).
    #[inline]
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Names a pooled connection offered to a race by the driver (usually the pool's slot key).
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct PooledId(pub u64);

impl fmt::Display for PooledId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pooled#{}", self.0)
    }
}
