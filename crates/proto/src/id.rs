//! Ids for attempts and pooled connections.

use std::fmt;

/// Names one connection attempt within a race. Ids count up from 0 in start order, so sorting
/// by id is sorting by start time.
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct AttemptId(pub u32);

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
