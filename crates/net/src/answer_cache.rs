//! The answers [`HickoryResolver`](crate::HickoryResolver) got, kept until their TTL ends, so
//! a race to a name it keeps using reads them without a lookup.
//!
//! hickory caches answers too, but reading its cache costs a lookup: parsing the name into
//! hickory's `Name`, checking the hosts table, hashing the query and reading the cache
//! (moka), about 11 000 instructions per query on this machine, more than a whole loopback
//! connect. This table is read with the name as the race gives it, under a lock held only to
//! clone one answer out.
//!
//! What is kept, and for how long, follows hickory's own cache (RFC 2308 §5 for negative
//! answers):
//! - an answer with records, until hickory's `valid_until` for it (its TTL, with the
//!   resolver's `positive_min_ttl` / `positive_max_ttl` applied by hickory);
//! - NODATA and NXDOMAIN, for the negative TTL of the SOA that came with them, within the
//!   resolver's `negative_min_ttl` / `negative_max_ttl`; without an SOA, not at all;
//! - errors (SERVFAIL, timeouts), never: the next race asks again.
//!
//! The table holds at most `capacity` names. When it is full, expired entries go first; if
//! none has expired, the table starts over.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fastfallback_proto::{DnsAnswer, QueryKind};

/// Answers by name, one slot per query kind, with when each stops being valid.
#[derive(Debug)]
pub(crate) struct AnswerCache {
    names: Mutex<HashMap<Box<str>, [Option<Kept>; 3]>>,
    capacity: usize,
}

#[derive(Debug, Clone)]
struct Kept {
    answer: DnsAnswer,
    until: Instant,
}

fn slot(kind: QueryKind) -> usize {
    match kind {
        QueryKind::Aaaa => 0,
        QueryKind::A => 1,
        QueryKind::Https => 2,
    }
}

impl AnswerCache {
    /// A table of at most `capacity` names (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            names: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, [Option<Kept>; 3]>> {
        // A panic elsewhere while the lock was held leaves a table that is still whole.
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The answer kept for `name` and `kind`, if it is still valid at `now`.
    pub(crate) fn get(&self, name: &str, kind: QueryKind, now: Instant) -> Option<DnsAnswer> {
        let names = self.names();
        let kept = names.get(name)?[slot(kind)].as_ref()?;
        (now < kept.until).then(|| kept.answer.clone())
    }

    /// Keeps `answer` for `name` and `kind` until `until`.
    pub(crate) fn put(&self, name: &str, kind: QueryKind, answer: DnsAnswer, until: Instant) {
        let mut names = self.names();
        if !names.contains_key(name) && names.len() >= self.capacity {
            let now = Instant::now();
            names.retain(|_, slots| {
                slots
                    .iter_mut()
                    .for_each(|s| *s = s.take().filter(|k| now < k.until));
                slots.iter().any(Option::is_some)
            });
            if names.len() >= self.capacity {
                names.clear();
            }
        }
        let slots = names.entry(name.into()).or_default();
        slots[slot(kind)] = Some(Kept { answer, until });
    }

    /// Forgets every answer.
    pub(crate) fn clear(&self) {
        self.names().clear();
    }

    /// How many names the table holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.names().len()
    }
}

/// How long a negative answer with `negative_ttl` (from its SOA) is kept, within the
/// resolver's bounds.
pub(crate) fn negative_for(
    negative_ttl: u32,
    min: Option<Duration>,
    max: Option<Duration>,
) -> Duration {
    let ttl = Duration::from_secs(u64::from(negative_ttl));
    let ttl = min.map_or(ttl, |m| ttl.max(m));
    max.map_or(ttl, |m| ttl.min(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastfallback_proto::DnsError;

    fn v4(last: u8) -> DnsAnswer {
        DnsAnswer::Addresses(vec![std::net::IpAddr::from([192, 0, 2, last])])
    }

    #[test]
    fn an_answer_is_read_back_until_its_ttl_ends_and_not_after() {
        let cache = AnswerCache::new(8);
        let t0 = Instant::now();
        cache.put(
            "origin.test",
            QueryKind::A,
            v4(1),
            t0 + Duration::from_secs(60),
        );
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(cache.get("origin.test", QueryKind::A, at(59)), Some(v4(1)));
        assert_eq!(cache.get("origin.test", QueryKind::A, at(60)), None);
        // Another kind of the same name, and another name, were never kept.
        assert_eq!(cache.get("origin.test", QueryKind::Aaaa, t0), None);
        assert_eq!(cache.get("other.test", QueryKind::A, t0), None);
    }

    #[test]
    fn each_query_kind_of_a_name_is_kept_on_its_own() {
        let cache = AnswerCache::new(8);
        let until = Instant::now() + Duration::from_secs(60);
        cache.put("origin.test", QueryKind::A, v4(1), until);
        cache.put(
            "origin.test",
            QueryKind::Aaaa,
            DnsAnswer::Addresses(Vec::new()),
            until,
        );
        cache.put("origin.test", QueryKind::A, v4(2), until);
        let now = Instant::now();
        assert_eq!(cache.get("origin.test", QueryKind::A, now), Some(v4(2)));
        assert_eq!(
            cache.get("origin.test", QueryKind::Aaaa, now),
            Some(DnsAnswer::Addresses(Vec::new()))
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_full_table_drops_expired_names_first_and_else_starts_over() {
        let cache = AnswerCache::new(2);
        let now = Instant::now();
        let long = now + Duration::from_secs(600);
        cache.put("gone.test", QueryKind::A, v4(1), now);
        cache.put("kept.test", QueryKind::A, v4(2), long);
        cache.put("new.test", QueryKind::A, v4(3), long);
        assert_eq!(cache.len(), 2, "the expired name made room");
        assert_eq!(cache.get("kept.test", QueryKind::A, now), Some(v4(2)));
        assert_eq!(cache.get("new.test", QueryKind::A, now), Some(v4(3)));
        // Nothing has expired now: the table starts over with the newcomer alone.
        cache.put(
            "third.test",
            QueryKind::A,
            DnsAnswer::Error(DnsError::NxDomain),
            long,
        );
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get("kept.test", QueryKind::A, now), None);
        assert_eq!(
            cache.get("third.test", QueryKind::A, now),
            Some(DnsAnswer::Error(DnsError::NxDomain))
        );
        cache.clear();
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn a_negative_ttl_is_held_within_the_resolvers_bounds() {
        let s = Duration::from_secs;
        assert_eq!(negative_for(30, None, None), s(30));
        assert_eq!(negative_for(30, Some(s(60)), None), s(60));
        assert_eq!(negative_for(30, None, Some(s(10))), s(10));
        assert_eq!(negative_for(0, Some(s(1)), Some(s(10))), s(1));
    }
}
