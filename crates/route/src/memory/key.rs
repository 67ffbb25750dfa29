//! The key of an origin in route memory: its host and port, compared in full.
//!
//! The store used to key origins by a 64-bit hash of the host and port, and a hash collision
//! gave the newer origin the older one's slot: a name chosen to collide (the multiplicative
//! hash is easy to invert) evicted another host's memory. Keyed by the name itself, two
//! distinct origins never share an entry; a collision costs a probe in the map, never a loss.
//!
//! A lookup must not allocate (it runs on every connect), so the map is searched with a
//! borrowed `(&Host, u16)`: [`OriginKey`] borrows as `dyn OriginRef`, which both forms
//! implement with the same hash and equality. An owned copy of the host is made only when a
//! new origin is inserted.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

use crate::Host;

/// An origin's key in the store, owned: its connect host and port.
#[derive(Clone, Debug)]
pub(super) struct OriginKey {
    /// The host, as the origin names it (a lower-cased name or an IP literal).
    pub(super) host: Host,
    /// The port.
    pub(super) port: u16,
}

impl OriginKey {
    /// An owned key for `host` and `port` (made on insert only).
    pub(super) fn new(host: &Host, port: u16) -> Self {
        Self {
            host: host.clone(),
            port,
        }
    }
}

/// An origin's host and port, owned ([`OriginKey`]) or borrowed (`(&Host, u16)`): what the map
/// hashes and compares.
pub(super) trait OriginRef {
    /// The host.
    fn host(&self) -> &Host;
    /// The port.
    fn port(&self) -> u16;
}

impl OriginRef for OriginKey {
    fn host(&self) -> &Host {
        &self.host
    }
    fn port(&self) -> u16 {
        self.port
    }
}

impl OriginRef for (&Host, u16) {
    fn host(&self) -> &Host {
        self.0
    }
    fn port(&self) -> u16 {
        self.1
    }
}

impl Hash for dyn OriginRef + '_ {
    /// A tag, the name's bytes or the address, then the port: one multiply per 8 bytes of
    /// name plus two, on every connect's lookup.
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.host() {
            Host::Name(n) => {
                state.write_u8(0);
                state.write(n.as_bytes());
            }
            Host::Ip(ip) => {
                state.write_u8(1);
                ip.hash(state);
            }
        }
        state.write_u16(self.port());
    }
}

impl PartialEq for dyn OriginRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.port() == other.port() && self.host() == other.host()
    }
}

impl Eq for dyn OriginRef + '_ {}

// `HashMap` requires the owned key to hash and compare exactly as its borrowed form does:
// both go through `dyn OriginRef`.
impl Hash for OriginKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn OriginRef).hash(state);
    }
}

impl PartialEq for OriginKey {
    fn eq(&self, other: &Self) -> bool {
        (self as &dyn OriginRef) == (other as &dyn OriginRef)
    }
}

impl Eq for OriginKey {}

impl<'a> Borrow<dyn OriginRef + 'a> for OriginKey {
    fn borrow(&self) -> &(dyn OriginRef + 'a) {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::hash::Hasher;
    use std::time::Duration;

    use fastfallback_proto::{FxHasher, Instant};

    use super::super::{Lesson, LessonKind, NetworkId, RouteDatabase, RouteMemory};
    use crate::{Address, Host};

    /// The store's old key: FxHash of a tag byte, the name's bytes and the port.
    fn old_origin_hash(name: &str, port: u16) -> u64 {
        let mut h = FxHasher::default();
        h.write_u8(0);
        h.write(name.as_bytes());
        h.write_u16(port);
        h.finish()
    }

    /// Two valid host names whose old keys are equal: the hash is multiplicative, so a
    /// colliding pair takes a few thousand tries to find (the second 8-byte word of each name
    /// cancels the difference the first words left).
    const VICTIM: &str = "vqjrdkbkaaaaaaba.example";
    const COLLIDER: &str = "vqbcorqivaalozxp.example";

    #[test]
    fn a_name_whose_old_hash_collides_with_another_leaves_its_memory_alone() {
        assert_eq!(old_origin_hash(VICTIM, 443), old_origin_hash(COLLIDER, 443));
        let db = RouteDatabase::new(RouteMemory::default());
        let home = NetworkId(1);
        let victim = Address::parse(&format!("https://{VICTIM}")).unwrap();
        let collider = Address::parse(&format!("https://{COLLIDER}")).unwrap();
        let target = "[2001:db8::a]:443".parse().unwrap();
        let other = "[2001:db8::b]:443".parse().unwrap();
        let connected = |target, ms| Lesson {
            target,
            at: Instant::from_millis(0),
            kind: LessonKind::Connected {
                rtt: Duration::from_millis(ms),
            },
        };
        db.learn(home, &victim, [connected(target, 20)]);
        db.learn(home, &collider, [connected(other, 90)]);
        let now = Instant::from_millis(1);
        let seen = db.view(home, &victim, now);
        assert_eq!(seen.srtt(target, now), Some(Duration::from_millis(20)));
        assert_eq!(seen.srtt(other, now), None, "no route of the other origin");
        let seen = db.view(home, &collider, now);
        assert_eq!(seen.srtt(other, now), Some(Duration::from_millis(90)));
        assert_eq!(seen.srtt(target, now), None);
        assert_eq!(db.len(home), 2);
        // Both survive a save and a load.
        let wall = 1_800_000_000;
        let loaded = RouteDatabase::new(RouteMemory::default());
        loaded
            .decode_into(&db.encode(now, wall), now, wall)
            .unwrap();
        assert_eq!(loaded.len(home), 2);
        let seen = loaded.view(home, &victim, now);
        assert_eq!(seen.srtt(target, now), Some(Duration::from_millis(20)));
    }

    #[test]
    fn the_owned_key_hashes_and_compares_as_its_borrowed_form() {
        use super::{OriginKey, OriginRef};
        use std::hash::BuildHasher;
        let build = fastfallback_proto::FxBuildHasher::default();
        let host: Host = "example.com".parse().unwrap();
        let owned = OriginKey::new(&host, 443);
        let borrowed: &dyn OriginRef = &(&host, 443u16);
        assert_eq!(build.hash_one(&owned), build.hash_one(borrowed));
        assert!((&owned as &dyn OriginRef) == (&(&host, 443u16) as &dyn OriginRef));
        assert!((&owned as &dyn OriginRef) != (&(&host, 80u16) as &dyn OriginRef));
    }
}
