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

/// Connects in flight per key: who leads each, and who waits for it. `W` identifies a call
/// (a race id, say): the leader's is kept so that only the leader can land its flight, and so
/// that a leader that gives up can hand the flight to a follower instead of waking them all.
///
/// ```
/// use fastfallback_pool::{Flights, Join, PoolKey};
///
/// let key = PoolKey::new("example.com", 443, true);
/// let mut flights: Flights<&str> = Flights::default();
/// assert_eq!(flights.join(&key, || "first"), Join::Lead);
/// assert_eq!(flights.join(&key, || "second"), Join::Follow);
/// assert_eq!(flights.join(&key, || "third"), Join::Follow);
/// assert_eq!(flights.leader(&key), Some(&"first"));
/// // The leader's call was dropped: "second" takes the connect over, "third" keeps waiting.
/// assert_eq!(flights.hand_over(&key), Some("second"));
/// assert_eq!(flights.land(&key), ["third"]);
/// assert_eq!(flights.join(&key, || "later"), Join::Lead);
/// ```
#[derive(Clone, Debug)]
pub struct Flights<W> {
    flights: HashMap<PoolKey, Flight<W>, FxBuildHasher>,
}

/// One connect in flight.
#[derive(Clone, Debug)]
struct Flight<W> {
    leader: W,
    followers: Vec<W>,
}

impl<W> Default for Flights<W> {
    fn default() -> Self {
        Self {
            flights: HashMap::default(),
        }
    }
}

impl<W> Flights<W> {
    /// Joins the flight for `key` with the call `make()` identifies: it leads if none is in
    /// flight, else it follows.
    pub fn join(&mut self, key: &PoolKey, make: impl FnOnce() -> W) -> Join {
        match self.flights.get_mut(key) {
            Some(flight) => {
                flight.followers.push(make());
                Join::Follow
            }
            None => {
                let flight = Flight {
                    leader: make(),
                    followers: Vec::new(),
                };
                self.flights.insert(key.clone(), flight);
                Join::Lead
            }
        }
    }

    /// The call leading `key`'s flight, if one is in flight.
    pub fn leader(&self, key: &PoolKey) -> Option<&W> {
        self.flights.get(key).map(|f| &f.leader)
    }

    /// The leader's connect for `key` ended (won or lost): the flight ends and its followers
    /// are handed back to be woken.
    pub fn land(&mut self, key: &PoolKey) -> Vec<W> {
        self.flights
            .remove(key)
            .map(|f| f.followers)
            .unwrap_or_default()
    }

    /// The leader gave up without an outcome (its call was dropped): the first follower leads
    /// the flight from now on and is returned, to be told to connect; the others keep
    /// following. With no follower the flight ends (`None`).
    pub fn hand_over(&mut self, key: &PoolKey) -> Option<W>
    where
        W: Clone,
    {
        let flight = self.flights.get_mut(key)?;
        if flight.followers.is_empty() {
            self.flights.remove(key);
            return None;
        }
        flight.leader = flight.followers.remove(0);
        Some(flight.leader.clone())
    }

    /// A follower of `key`'s flight left (its call was dropped or was served some other way):
    /// it is not woken, nor handed the flight. Returns whether it was following.
    pub fn leave(&mut self, key: &PoolKey, follower: &W) -> bool
    where
        W: PartialEq,
    {
        let Some(flight) = self.flights.get_mut(key) else {
            return false;
        };
        let before = flight.followers.len();
        flight.followers.retain(|w| w != follower);
        flight.followers.len() != before
    }

    /// Whether a connect is in flight for `key`.
    pub fn is_flying(&self, key: &PoolKey) -> bool {
        self.flights.contains_key(key)
    }

    /// How many flights are in the air.
    pub fn len(&self) -> usize {
        self.flights.len()
    }

    /// Whether no flight is in the air.
    pub fn is_empty(&self) -> bool {
        self.flights.is_empty()
    }
}

/// Which protocol each key's server spoke last time, and the HTTP/2 stream limit it set, so
/// a fresh pool knows to do single flight for an HTTP/2 origin from the first call, and a new
/// connection to it opens no more streams than the server allows before its SETTINGS frame
/// arrives (RFC 9113 §5.1.2: streams past the limit are refused). Bounded: when full, the
/// oldest half is forgotten.
#[derive(Clone, Debug)]
pub struct ProtocolMemory {
    spoke: HashMap<PoolKey, Spoke, FxBuildHasher>,
    capacity: usize,
    clock: u64,
}

/// What one key's server said last time.
#[derive(Clone, Copy, Debug)]
struct Spoke {
    protocol: Protocol,
    /// Its SETTINGS_MAX_CONCURRENT_STREAMS, once an HTTP/2 connection learned it.
    max_streams: Option<u32>,
    /// When it was last told (the memory's own counter, for eviction).
    age: u64,
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
        self.spoke.get(key).map(|s| s.protocol)
    }

    /// The HTTP/2 stream limit `key`'s server set last time, if known.
    pub fn max_streams(&self, key: &PoolKey) -> Option<u32> {
        self.spoke.get(key).and_then(|s| s.max_streams)
    }

    /// Remembers that `key`'s server speaks `protocol` (a stream limit already learned is
    /// kept while it speaks HTTP/2).
    pub fn remember(&mut self, key: &PoolKey, protocol: Protocol) {
        let max_streams = self
            .spoke
            .get(key)
            .and_then(|s| s.max_streams)
            .filter(|_| protocol.is_multiplexed());
        self.store(key, protocol, max_streams);
    }

    /// Remembers that `key`'s server speaks HTTP/2 with at most `max_streams` concurrent
    /// streams (its SETTINGS frame).
    pub fn remember_max_streams(&mut self, key: &PoolKey, max_streams: u32) {
        self.store(key, Protocol::Http2, Some(max_streams));
    }

    fn store(&mut self, key: &PoolKey, protocol: Protocol, max_streams: Option<u32>) {
        self.clock += 1;
        if !self.spoke.contains_key(key) && self.spoke.len() >= self.capacity {
            let mut ages: Vec<u64> = self.spoke.values().map(|s| s.age).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            self.spoke.retain(|_, s| s.age > cut);
        }
        let spoke = Spoke {
            protocol,
            max_streams,
            age: self.clock,
        };
        self.spoke.insert(key.clone(), spoke);
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
    fn a_leader_that_gives_up_hands_the_flight_to_its_first_live_follower() {
        let key = PoolKey::new("a.example", 443, true);
        let mut f: Flights<u32> = Flights::default();
        assert_eq!(f.join(&key, || 1), Join::Lead);
        for w in 2..=4 {
            assert_eq!(f.join(&key, || w), Join::Follow);
        }
        assert!(f.leave(&key, &2), "2 was following");
        assert!(!f.leave(&key, &2), "and left once");
        assert_eq!(f.hand_over(&key), Some(3), "2 left, so 3 is next");
        assert_eq!(f.leader(&key), Some(&3));
        assert_eq!(f.join(&key, || 5), Join::Follow, "the flight goes on");
        assert_eq!(f.hand_over(&key), Some(4));
        assert_eq!(f.hand_over(&key), Some(5));
        assert_eq!(f.hand_over(&key), None, "nobody left to lead");
        assert!(!f.is_flying(&key));
    }

    #[test]
    fn a_learned_stream_limit_is_kept_while_the_server_speaks_h2() {
        let key = PoolKey::new("a.example", 443, true);
        let mut m = ProtocolMemory::new(8);
        assert_eq!(m.max_streams(&key), None);
        m.remember(&key, Protocol::Http2);
        m.remember_max_streams(&key, 10);
        m.remember(&key, Protocol::Http2);
        assert_eq!(
            m.max_streams(&key),
            Some(10),
            "a new h2 connection keeps it"
        );
        m.remember(&key, Protocol::Http11);
        assert_eq!(
            m.max_streams(&key),
            None,
            "an HTTP/1 server has no stream limit"
        );
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
