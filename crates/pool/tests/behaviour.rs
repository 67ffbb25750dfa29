//! Behaviour of `ConnectionPool`: allocation per protocol, release, no-new-exchanges, and
//! OkHttp-style idle eviction (cases CP-1 to CP-4). Virtual time in milliseconds; keep-alive is
//! 100 ms throughout.

use std::time::Duration;

use fastfallback_pool::{
    Cleanup, ConnectionPool, PROVISIONAL_MAX_STREAMS, PoolConfig, PoolKey, Release,
};
use fastfallback_proto::{Instant, PooledId, Protocol};

const KEEP_ALIVE_MS: u64 = 100;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn ms(n: u64) -> Option<Duration> {
    Some(Duration::from_millis(n))
}

fn pool(max_idle: usize) -> ConnectionPool<&'static str> {
    ConnectionPool::new(PoolConfig {
        keep_alive: Duration::from_millis(KEEP_ALIVE_MS),
        max_idle,
    })
}

fn key() -> PoolKey {
    PoolKey::new("example.com", 443, true)
}

fn nothing_closed(next_run: Option<Duration>) -> Cleanup<&'static str> {
    Cleanup {
        closed: vec![],
        next_run,
    }
}

fn evicted(conn: &'static str) -> Cleanup<&'static str> {
    Cleanup {
        closed: vec![conn],
        next_run: ms(0),
    }
}

/// Inserts an HTTP/1 connection idle since `idle_at`.
fn idle_since(p: &mut ConnectionPool<&'static str>, conn: &'static str, idle_at: u64) -> PooledId {
    p.insert(key(), conn, Protocol::Http11, 0, at(idle_at))
}

// CP-1
#[test]
fn idle_connection_evicted_exactly_at_keep_alive() {
    let mut p = pool(5);
    p.insert(key(), "c1", Protocol::Http11, 0, at(50));

    assert_eq!(p.cleanup(at(50)), nothing_closed(ms(100)));
    assert_eq!(p.cleanup(at(60)), nothing_closed(ms(90)));
    assert_eq!(p.cleanup(at(149)), nothing_closed(ms(1)));
    assert_eq!(p.len(), 1);

    assert_eq!(p.cleanup(at(150)), evicted("c1"));
    assert_eq!(p.len(), 0);
    assert_eq!(p.cleanup(at(150)), nothing_closed(None));
}

// CP-2
#[test]
fn in_use_connection_is_never_evicted() {
    let mut p = pool(0);
    let id = p.insert(key(), "c1", Protocol::Http11, 0, at(0));
    assert_eq!(p.acquire(&key(), at(0)), Some(id));

    for t in [50, 60, 160] {
        assert_eq!(p.cleanup(at(t)), nothing_closed(ms(100)), "t = {t}");
    }
    assert_eq!(p.len(), 1);
    assert_eq!(p.allocations(id), Some(1));
}

// CP-3
#[test]
fn earliest_idle_connection_is_evicted_first() {
    let mut p = pool(5);
    let c1 = p.insert(key(), "c1", Protocol::Http11, 0, at(0));
    let c2 = p.insert(key(), "c2", Protocol::Http11, 0, at(0));
    assert!(p.acquire(&key(), at(0)).is_some());
    assert!(p.acquire(&key(), at(0)).is_some());
    assert_eq!(p.release(c2, at(50)), Release::Released);
    assert_eq!(p.release(c1, at(75)), Release::Released);

    assert_eq!(p.cleanup(at(75)), nothing_closed(ms(75)));
    assert_eq!(p.cleanup(at(149)), nothing_closed(ms(1)));
    assert_eq!(p.cleanup(at(150)), evicted("c2"));
    assert_eq!(p.cleanup(at(150)), nothing_closed(ms(25)));
    assert_eq!(p.cleanup(at(175)), evicted("c1"));
    assert_eq!(p.cleanup(at(175)), nothing_closed(None));
}

// CP-4
#[test]
fn oldest_idle_evicted_when_over_max_idle() {
    let mut p = pool(2);
    let c1 = idle_since(&mut p, "c1", 50);
    let c2 = idle_since(&mut p, "c2", 75);

    assert_eq!(p.cleanup(at(100)), nothing_closed(ms(50)));
    assert_eq!(p.idle_count(), 2);

    let c3 = p.insert(key(), "c3", Protocol::Http11, 0, at(75));
    assert_eq!(p.idle_count(), 3);
    assert_eq!(p.cleanup(at(100)), evicted("c1"));
    assert_eq!(p.get(c1), None);
    assert_eq!(p.get(c2), Some(&"c2"));
    assert_eq!(p.get(c3), Some(&"c3"));
    assert_eq!(p.idle_count(), 2);

    // Back within max_idle: the next deadline is c2's (and c3's) keep-alive, 25 ms idle.
    assert_eq!(p.cleanup(at(100)), nothing_closed(ms(75)));
}

#[test]
fn http1_connection_carries_one_exchange_at_a_time() {
    let mut p = pool(5);
    let id = p.insert(key(), "c1", Protocol::Http11, 8, at(0));
    assert_eq!(p.allocation_limit(id), Some(1));
    assert_eq!(p.idle_count(), 1);

    assert_eq!(p.acquire(&key(), at(10)), Some(id));
    assert_eq!(p.allocations(id), Some(1));
    assert_eq!(p.idle_count(), 0);
    assert_eq!(p.acquire(&key(), at(10)), None);

    assert_eq!(p.release(id, at(20)), Release::Released);
    assert_eq!(p.allocations(id), Some(0));
    assert_eq!(p.idle_count(), 1);
    // Releasing an idle connection again changes nothing.
    assert_eq!(p.release(id, at(20)), Release::Ignored);
    assert_eq!(p.allocations(id), Some(0));

    assert_eq!(p.acquire(&key(), at(30)), Some(id));
    assert_eq!(p.allocations(id), Some(1));
}

#[test]
fn http1_reuse_prefers_the_most_recently_idle_connection() {
    let mut p = pool(5);
    let c1 = p.insert(key(), "c1", Protocol::Http11, 0, at(0));
    let c2 = p.insert(key(), "c2", Protocol::Http11, 0, at(0));
    let c3 = p.insert(key(), "c3", Protocol::Http11, 0, at(0));
    for _ in 0..3 {
        assert!(p.acquire(&key(), at(0)).is_some());
    }
    assert_eq!(p.release(c1, at(20)), Release::Released);
    assert_eq!(p.release(c2, at(10)), Release::Released);
    assert_eq!(p.release(c3, at(30)), Release::Released);

    assert_eq!(p.acquire(&key(), at(40)), Some(c3));
    assert_eq!(p.acquire(&key(), at(40)), Some(c1));
    assert_eq!(p.acquire(&key(), at(40)), Some(c2));
    assert_eq!(p.acquire(&key(), at(40)), None);
}

#[test]
fn http2_connection_is_shared_up_to_its_stream_limit() {
    let mut p = pool(5);
    let h1 = p.insert(key(), "h1", Protocol::Http11, 0, at(0));
    let h2 = p.insert(key(), "h2", Protocol::Http2, 3, at(0));
    assert_eq!(p.allocation_limit(h2), Some(3));

    // The multiplexed connection is preferred over the idle HTTP/1 one, until it is full.
    for n in 1..=3 {
        assert_eq!(p.acquire(&key(), at(10)), Some(h2));
        assert_eq!(p.allocations(h2), Some(n));
    }
    assert_eq!(p.acquire(&key(), at(10)), Some(h1));
    assert_eq!(p.acquire(&key(), at(10)), None);

    assert_eq!(p.release(h2, at(20)), Release::Released);
    assert_eq!(p.allocations(h2), Some(2));
    assert_eq!(p.idle_count(), 0);
    assert_eq!(p.acquire(&key(), at(20)), Some(h2));
    assert_eq!(p.allocations(h2), Some(3));

    // Idle only once every stream has ended.
    for _ in 0..3 {
        assert_eq!(p.release(h2, at(30)), Release::Released);
    }
    assert_eq!(p.allocations(h2), Some(0));
    assert_eq!(p.idle_count(), 1);
    assert_eq!(p.release(h2, at(30)), Release::Ignored);
}

#[test]
fn http2_without_settings_gets_the_provisional_limit() {
    let mut p = pool(5);
    let h2 = p.insert(key(), "h2", Protocol::Http2, 0, at(0));
    assert_eq!(PROVISIONAL_MAX_STREAMS, 100);
    assert_eq!(p.allocation_limit(h2), Some(100));
    for _ in 0..100 {
        assert_eq!(p.acquire(&key(), at(1)), Some(h2));
    }
    assert_eq!(p.acquire(&key(), at(1)), None);
    assert_eq!(p.allocations(h2), Some(100));
}

#[test]
fn lowering_stream_limit_stops_new_allocations() {
    let mut p = pool(5);
    let h2 = p.insert(key(), "h2", Protocol::Http2, 10, at(0));
    for _ in 0..4 {
        assert_eq!(p.acquire(&key(), at(0)), Some(h2));
    }

    assert!(p.set_max_streams(h2, 2));
    assert_eq!(p.allocation_limit(h2), Some(2));
    // Running streams continue; no new ones.
    assert_eq!(p.allocations(h2), Some(4));
    assert_eq!(p.acquire(&key(), at(1)), None);

    assert_eq!(p.release(h2, at(2)), Release::Released);
    assert_eq!(p.release(h2, at(2)), Release::Released);
    assert_eq!(p.allocations(h2), Some(2));
    assert_eq!(p.acquire(&key(), at(3)), None);

    assert_eq!(p.release(h2, at(4)), Release::Released);
    assert_eq!(p.acquire(&key(), at(5)), Some(h2));
    assert_eq!(p.allocations(h2), Some(2));
    assert_eq!(p.acquire(&key(), at(5)), None);

    // SETTINGS_MAX_CONCURRENT_STREAMS = 0 is literal: no streams at all.
    assert!(p.set_max_streams(h2, 0));
    assert_eq!(p.allocation_limit(h2), Some(0));
    assert_eq!(p.release(h2, at(6)), Release::Released);
    assert_eq!(p.release(h2, at(6)), Release::Released);
    assert_eq!(p.acquire(&key(), at(7)), None);

    // Raising it again reopens the connection.
    assert!(p.set_max_streams(h2, 1));
    assert_eq!(p.acquire(&key(), at(8)), Some(h2));
    assert_eq!(p.acquire(&key(), at(8)), None);

    // HTTP/1 keeps its limit of 1; unknown ids are reported.
    let h1 = p.insert(key(), "h1", Protocol::Http11, 0, at(9));
    assert!(p.set_max_streams(h1, 50));
    assert_eq!(p.allocation_limit(h1), Some(1));
    assert!(!p.set_max_streams(PooledId(999), 5));
}

#[test]
fn no_new_exchanges_connection_is_not_handed_out_and_closes_when_released() {
    let mut p = pool(5);
    let h2 = p.insert(key(), "h2", Protocol::Http2, 10, at(0));
    assert_eq!(p.acquire(&key(), at(0)), Some(h2));
    assert_eq!(p.acquire(&key(), at(0)), Some(h2));

    assert!(p.mark_no_new_exchanges(h2));
    assert_eq!(p.acquire(&key(), at(1)), None);
    assert_eq!(p.allocations(h2), Some(2));
    // In use: cleanup leaves it alone.
    assert_eq!(p.cleanup(at(1)), nothing_closed(ms(100)));

    assert_eq!(p.release(h2, at(2)), Release::Released);
    assert_eq!(p.release(h2, at(3)), Release::Close("h2"));
    assert_eq!(p.len(), 0);
    assert_eq!(p.get(h2), None);
    assert_eq!(p.release(h2, at(4)), Release::Ignored);
    assert_eq!(p.cleanup(at(4)), nothing_closed(None));

    // Marked while idle: not handed out, not counted as idle, closed by the next cleanup.
    let h1 = p.insert(key(), "h1", Protocol::Http11, 0, at(10));
    let other = p.insert(key(), "other", Protocol::Http11, 0, at(10));
    assert!(p.mark_no_new_exchanges(h1));
    assert_eq!(p.idle_count(), 1);
    assert_eq!(p.acquire(&key(), at(11)), Some(other));
    assert_eq!(p.acquire(&key(), at(11)), None);
    assert_eq!(
        p.cleanup(at(12)),
        Cleanup {
            closed: vec!["h1"],
            next_run: ms(100)
        }
    );
    assert_eq!(p.len(), 1);
    assert!(!p.mark_no_new_exchanges(h1));
}

#[test]
fn acquire_for_other_key_finds_nothing() {
    let mut p = pool(5);
    p.insert(key(), "c1", Protocol::Http11, 0, at(0));
    p.insert(key(), "c2", Protocol::Http2, 0, at(0));

    for other in [
        PoolKey::new("example.org", 443, true),
        PoolKey::new("example.com", 8443, true),
        PoolKey::new("example.com", 443, false),
    ] {
        assert_eq!(p.acquire(&other, at(1)), None, "{other:?}");
    }
    assert_eq!(p.idle_count(), 2);
}

#[test]
fn expired_idle_connection_is_not_handed_out() {
    let mut p = pool(5);
    let id = p.insert(key(), "c1", Protocol::Http11, 0, at(0));
    assert_eq!(p.acquire(&key(), at(99)), Some(id));
    assert_eq!(p.release(id, at(100)), Release::Released);
    assert_eq!(p.acquire(&key(), at(200)), None);
    assert_eq!(p.cleanup(at(200)), evicted("c1"));
}

#[test]
fn remove_and_unknown_ids() {
    let mut p = pool(5);
    let a = p.insert(key(), "a", Protocol::Http11, 0, at(0));
    let b = p.insert(key(), "b", Protocol::Http11, 0, at(0));
    assert_ne!(a, b);
    assert_eq!(p.key(a), Some(&key()));
    assert_eq!(p.acquire(&key(), at(1)), Some(b));

    // Removing works whatever the state; the id is dead afterwards.
    assert_eq!(p.remove(b), Some("b"));
    assert_eq!(p.remove(b), None);
    assert_eq!(p.release(b, at(2)), Release::Ignored);
    assert!(!Release::<&str>::Ignored.is_released());
    assert_eq!(p.allocations(b), None);
    assert_eq!(p.acquire(&key(), at(2)), Some(a));
    assert_eq!(p.acquire(&key(), at(2)), None);

    if let Some(conn) = p.get_mut(a) {
        *conn = "a2";
    }
    assert_eq!(p.remove(a), Some("a2"));
    assert!(p.is_empty());
    assert_eq!(p.acquire(&key(), at(3)), None);
}

// ---- coalescing (spec/okhttp-connection-layer.md §3.7) ----

fn h2_for(p: &mut ConnectionPool<&'static str>, host: &str, peer: &str) -> PooledId {
    let id = p.insert(
        PoolKey::new(host, 443, true),
        "h2",
        Protocol::Http2,
        10,
        at(0),
    );
    assert!(p.set_peer(id, peer.parse().unwrap()));
    id
}

fn ips(list: &[&str]) -> Vec<std::net::IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn an_h2_connection_to_a_resolved_address_is_offered_to_another_host() {
    let mut p = pool(5);
    let id = h2_for(&mut p, "a.example", "[2001:db8::1]:443");
    let b = PoolKey::new("b.example", 443, true);
    let found: Vec<_> = p
        .coalescing_candidates(&b, &ips(&["192.0.2.9", "2001:db8::1"]))
        .collect();
    assert_eq!(found, [id]);
    assert!(p.acquire_id(id));
    assert_eq!(p.allocations(id), Some(1));
}

#[test]
fn a_connection_to_an_address_the_host_did_not_resolve_to_is_never_offered() {
    let mut p = pool(5);
    h2_for(&mut p, "a.example", "[2001:db8::1]:443");
    let b = PoolKey::new("b.example", 443, true);
    assert_eq!(
        p.coalescing_candidates(&b, &ips(&["2001:db8::2"])).count(),
        0
    );
}

#[test]
fn proxies_ports_tls_configurations_and_http1_never_coalesce() {
    let mut p = pool(5);
    h2_for(&mut p, "a.example", "[2001:db8::1]:443");
    let h1 = p.insert(
        PoolKey::new("c.example", 443, true),
        "h1",
        Protocol::Http11,
        0,
        at(0),
    );
    p.set_peer(h1, "[2001:db8::3]:443".parse().unwrap());
    let resolved = ips(&["2001:db8::1", "2001:db8::3"]);
    for key in [
        PoolKey::new("b.example", 443, true).with_proxy("http proxy.example:8080"),
        PoolKey::new("b.example", 8443, true),
        PoolKey::new("b.example", 443, true).with_tls_config(9),
        PoolKey::new("b.example", 443, false),
    ] {
        assert_eq!(
            p.coalescing_candidates(&key, &resolved).count(),
            0,
            "{key:?}"
        );
    }
    // HTTP/1 (c.example's connection) is never offered; the HTTP/2 one is.
    let b = PoolKey::new("b.example", 443, true);
    assert_eq!(p.coalescing_candidates(&b, &resolved).count(), 1);
}

#[test]
fn a_421_bars_the_host_from_that_connection_only() {
    let mut p = pool(5);
    let id = h2_for(&mut p, "a.example", "[2001:db8::1]:443");
    let resolved = ips(&["2001:db8::1"]);
    assert!(p.forbid_coalescing(id, "b.example"));
    let b = PoolKey::new("b.example", 443, true);
    let c = PoolKey::new("c.example", 443, true);
    assert_eq!(p.coalescing_candidates(&b, &resolved).count(), 0);
    assert_eq!(p.coalescing_candidates(&c, &resolved).count(), 1);
    // Its own host still uses it.
    assert_eq!(
        p.acquire(&PoolKey::new("a.example", 443, true), at(1)),
        Some(id)
    );
}

#[test]
fn a_full_or_retired_connection_is_not_offered_or_acquired() {
    let mut p = pool(5);
    let id = p.insert(
        PoolKey::new("a.example", 443, true),
        "h2",
        Protocol::Http2,
        1,
        at(0),
    );
    p.set_peer(id, "[2001:db8::1]:443".parse().unwrap());
    let b = PoolKey::new("b.example", 443, true);
    let resolved = ips(&["2001:db8::1"]);
    assert!(p.acquire_id(id));
    assert!(!p.acquire_id(id), "its one stream is taken");
    assert_eq!(p.coalescing_candidates(&b, &resolved).count(), 0);
    assert_eq!(p.release(id, at(1)), Release::Released);
    p.mark_no_new_exchanges(id);
    assert_eq!(p.coalescing_candidates(&b, &resolved).count(), 0);
    assert!(!p.acquire_id(id));
}

#[test]
fn evict_idle_closes_idle_connections_and_keeps_busy_ones() {
    let mut pool = ConnectionPool::new(PoolConfig::default());
    let key = PoolKey::new("example.com", 443, true);
    let t = Instant::from_millis(5);
    let busy = pool.insert(key.clone(), "busy", Protocol::Http11, 0, Instant::ZERO);
    let idle = pool.insert(key.clone(), "idle", Protocol::Http11, 0, Instant::ZERO);
    assert_eq!(pool.acquire(&key, t), Some(idle));
    assert!(pool.release(idle, t).is_released());
    assert!(pool.acquire_id(busy));
    assert_eq!(pool.evict_idle(), vec!["idle"]);
    assert_eq!(pool.len(), 1);
    assert_eq!(pool.get(busy), Some(&"busy"));
    assert_eq!(pool.idle_since(idle), None);
    assert_eq!(pool.idle_since(busy), Some(Instant::ZERO));
}

#[test]
fn capacity_sums_stream_limits_of_connections_that_take_exchanges() {
    let mut pool = ConnectionPool::new(PoolConfig::default());
    let key = PoolKey::new("example.com", 443, true);
    assert_eq!(pool.capacity(&key), 0);
    let h2 = pool.insert(key.clone(), "h2", Protocol::Http2, 7, Instant::ZERO);
    pool.insert(key.clone(), "h1", Protocol::Http11, 0, Instant::ZERO);
    pool.insert(
        PoolKey::new("other.test", 443, true),
        "x",
        Protocol::Http11,
        0,
        Instant::ZERO,
    );
    assert_eq!(pool.capacity(&key), 8);
    pool.mark_no_new_exchanges(h2);
    assert_eq!(pool.capacity(&key), 1);
}

#[test]
fn a_full_h2_connection_still_multiplexes_its_key_until_it_takes_no_new_exchanges() {
    let mut p = pool(5);
    let k = key();
    assert!(!p.multiplexes(&k), "nothing pooled");
    p.insert(k.clone(), "h1", Protocol::Http11, 0, at(0));
    assert!(
        !p.multiplexes(&k),
        "HTTP/1 carries one exchange: nobody waits on it"
    );
    let h2 = p.insert(k.clone(), "h2", Protocol::Http2, 1, at(0));
    assert!(p.acquire_id(h2));
    assert!(!p.acquire_id(h2), "its one stream is taken");
    assert!(p.multiplexes(&k), "full, but a stream will free up");
    p.mark_no_new_exchanges(h2);
    assert!(
        !p.multiplexes(&k),
        "going away: no stream will come from it"
    );
    assert!(!p.multiplexes(&PoolKey::new("other.example", 443, true)));
}
