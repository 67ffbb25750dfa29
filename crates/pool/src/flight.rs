//! Single-flight for new hosts, and memory of which protocol each origin speaks.
//!
//! While nothing is pooled for a key and its protocol is unknown (or known to be HTTP/2),
//! concurrent calls should not each open a connection: the first call leads a connect, the
//! others follow it and wait. When the leader lands, its followers come back: on HTTP/2 they
//! share the new connection; on HTTP/1 (one exchange per connection) they connect at once on
//! their own. hyper-util opens one connection per concurrent request to a new HTTP/2 host
//! (hyper#1485) and OkHttp opens duplicates too (okhttp#2573); this is how we do not.

use std::collections::HashMap;

use fastfallback_proto::{FxBuildHasher, Protocol};

use crate::PoolKey;

/// Whether a call leads the connect for its key or follows one already in flight.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Join {
    /// No connect is in flight: this call makes it, and must [`Flights::land`] it.
    Lead,
    /// A connect is in flight: this call waits for it.
    Follow,
}

/// Connects in flight per key, and who waits for each. `W` is whatever the driver needs to
/// wake a follower (a channel sender, say).
///
/// ```
/// use fastfallback_pool::{Flights, Join, PoolKey};
///
/// let key = PoolKey::new("example.com", 443, true);
/// let mut flights: Flights<&str> = Flights::default();
/// assert_eq!(flights.join(&key, || "first"), Join::Lead);
/// assert_eq!(flights.join(&key, || "second"), Join::Follow);
/// assert_eq!(flights.join(&key, || "third"), Join::Follow);
/// assert_eq!(flights.land(&key), ["second", "third"]);
/// assert_eq!(flights.join(&key, || "later"), Join::Lead);
/// ```
#[derive(Debug)]
pub struct Flights<W> {
    waiting: HashMap<PoolKey, Vec<W>, FxBuildHasher>,
}

impl<W> Default for Flights<W> {
    fn default() -> Self {
        Self {
            waiting: HashMap::default(),
        }
    }
}

impl<W> Flights<W> {
    /// Joins the flight for `key`: leads it if none is in flight, else follows, registering
    /// the waiter `make()` builds.
    pub fn join(&mut self, key: &PoolKey, make: impl FnOnce() -> W) -> Join {
        match self.waiting.get_mut(key) {
            Some(waiters) => {
                waiters.push(make());
                Join::Follow
            }
            None => {
                self.waiting.insert(key.clone(), Vec::new());
                Join::Lead
            }
        }
    }

    /// The leader's connect for `key` ended (won, lost or was dropped): the flight ends and its
    /// followers are handed back to be woken.
    pub fn land(&mut self, key: &PoolKey) -> Vec<W> {
        self.waiting.remove(key).unwrap_or_default()
    }

    /// Whether a connect is in flight for `key`.
    pub fn is_flying(&self, key: &PoolKey) -> bool {
        self.waiting.contains_key(key)
    }

    /// How many flights are in the air.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether no flight is in the air.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Which protocol each key's server spoke last time, so a fresh pool knows to do
/// single-flight for an HTTP/2 origin from the first call. Bounded: when full, the oldest half
/// is forgotten.
#[derive(Debug)]
pub struct ProtocolMemory {
    spoke: HashMap<PoolKey, (Protocol, u64), FxBuildHasher>,
    capacity: usize,
    clock: u64,
}

impl ProtocolMemory {
    /// Remembers at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            spoke: HashMap::default(),
            capacity: capacity.max(1),
            clock: 0,
        }
    }

    /// What `key`'s server spoke last time, if known.
    pub fn get(&self, key: &PoolKey) -> Option<Protocol> {
        self.spoke.get(key).map(|(p, _)| *p)
    }

    /// Remembers that `key`'s server speaks `protocol`.
    pub fn remember(&mut self, key: &PoolKey, protocol: Protocol) {
        self.clock += 1;
        if !self.spoke.contains_key(key) && self.spoke.len() >= self.capacity {
            let mut ages: Vec<u64> = self.spoke.values().map(|(_, t)| *t).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            self.spoke.retain(|_, (_, t)| *t > cut);
        }
        self.spoke.insert(key.clone(), (protocol, self.clock));
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.spoke.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.spoke.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flight_lands_once_and_a_new_one_can_start() {
        let key = PoolKey::new("a.example", 443, true);
        let other = PoolKey::new("b.example", 443, true);
        let mut f: Flights<u32> = Flights::default();
        assert_eq!(f.join(&key, || 1), Join::Lead);
        assert_eq!(f.join(&other, || 2), Join::Lead, "keys fly apart");
        assert_eq!(f.join(&key, || 3), Join::Follow);
        assert_eq!(f.land(&key), [3]);
        assert!(f.land(&key).is_empty(), "landing twice wakes nobody");
        assert!(f.is_flying(&other));
    }

    #[test]
    fn protocol_memory_stays_bounded_and_keeps_the_newest() {
        let mut m = ProtocolMemory::new(8);
        for i in 0..100u16 {
            m.remember(&PoolKey::new("h.example", i + 1, true), Protocol::Http2);
            assert!(m.len() <= 8);
        }
        assert_eq!(
            m.get(&PoolKey::new("h.example", 100, true)),
            Some(Protocol::Http2)
        );
        assert_eq!(m.get(&PoolKey::new("h.example", 1, true)), None);
        m.remember(&PoolKey::new("h.example", 100, true), Protocol::Http11);
        assert_eq!(
            m.get(&PoolKey::new("h.example", 100, true)),
            Some(Protocol::Http11)
        );
    }
}
