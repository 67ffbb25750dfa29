//! Arbitrary sequences of pool operations (insert, acquire, release, mark, limits, cleanup,
//! eviction, removal) on a few keys, with time moving on. After every step: no connection
//! is handed an exchange past its limit, the pool's counts equal what the callers hold, a
//! closed connection never comes back, and no connection is closed twice. Run:
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run pool_ops`.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fastfallback_pool::{ConnectionPool, PoolConfig, PoolKey, Release};
use fastfallback_proto::{Instant, PooledId, Protocol};
use libfuzzer_sys::fuzz_target;

fn key(i: u8) -> PoolKey {
    PoolKey::new(format!("h{}.test", i % 3), 443, true)
}

fuzz_target!(|data: &[u8]| {
    let mut pool: ConnectionPool<u64> = ConnectionPool::new(PoolConfig {
        keep_alive: Duration::from_millis(u64::from(*data.first().unwrap_or(&50)) + 1),
        max_idle: usize::from(*data.get(1).unwrap_or(&2) % 4),
    });
    let mut now = 0u64;
    let mut next = 1u64;
    let mut live: BTreeSet<u64> = BTreeSet::new();
    let mut closed: BTreeSet<u64> = BTreeSet::new();
    // What callers hold: connection → exchanges.
    let mut held: BTreeMap<u64, u32> = BTreeMap::new();
    let close = |c: u64,
                 live: &mut BTreeSet<u64>,
                 closed: &mut BTreeSet<u64>,
                 held: &BTreeMap<u64, u32>| {
        assert!(live.remove(&c), "closed {c}, which was not live");
        assert!(closed.insert(c), "closed {c} twice");
        assert!(!held.contains_key(&c), "closed {c} while an exchange was held");
    };
    for op in data.get(2..).unwrap_or(&[]).chunks(2) {
        let (code, arg) = (op[0], *op.get(1).unwrap_or(&0));
        let t = Instant::from_millis(now);
        match code % 8 {
            0 => {
                let protocol = if arg & 1 == 0 { Protocol::Http11 } else { Protocol::Http2 };
                let id = pool.insert(key(arg), next, protocol, u32::from(arg % 4), t);
                assert_eq!(pool.get(id), Some(&next));
                live.insert(next);
                next += 1;
            }
            1 => {
                if let Some(id) = pool.acquire(&key(arg), t) {
                    assert!(live.contains(&id.0), "acquired {id}, which is not live");
                    // An exchange is handed out only within the connection's limit. (The
                    // limit itself may later drop below the count: a peer can lower
                    // SETTINGS_MAX_CONCURRENT_STREAMS while streams are open.)
                    let n = pool.allocations(id).unwrap_or(0);
                    assert!(n <= pool.allocation_limit(id).unwrap_or(0), "{id} over its limit");
                    assert_eq!(pool.takes_new_exchanges(id).is_some(), true);
                    *held.entry(id.0).or_default() += 1;
                }
            }
            2 => {
                // Release one held exchange (the arg picks which), or an unknown id.
                let pick = held.keys().nth(usize::from(arg) % (held.len() + 1)).copied();
                let id = PooledId(pick.unwrap_or(u64::from(arg) + 10_000));
                let outcome = pool.release(id, t);
                match (pick, outcome) {
                    (Some(c), Release::Released) => decrement(&mut held, c),
                    (Some(c), Release::Close(conn)) => {
                        assert_eq!(conn, c);
                        decrement(&mut held, c);
                        close(c, &mut live, &mut closed, &held);
                    }
                    (Some(c), Release::Ignored) => panic!("held exchange on {c} not counted"),
                    (None, Release::Ignored) => {}
                    (None, _) => panic!("an unknown id released something"),
                }
            }
            3 => {
                let id = PooledId(u64::from(arg % 16) + 1);
                pool.mark_no_new_exchanges(id);
            }
            4 => {
                let id = PooledId(u64::from(arg % 16) + 1);
                pool.set_max_streams(id, u32::from(arg % 5));
            }
            5 => {
                for c in pool.cleanup(t).closed {
                    close(c, &mut live, &mut closed, &held);
                }
            }
            6 => {
                for c in pool.evict_idle() {
                    close(c, &mut live, &mut closed, &held);
                }
            }
            _ => {
                // The driver removes only connections nobody holds.
                let id = PooledId(u64::from(arg % 16) + 1);
                if !held.contains_key(&id.0)
                    && let Some(c) = pool.remove(id)
                {
                    close(c, &mut live, &mut closed, &held);
                }
            }
        }
        now += u64::from(arg % 32);
        // Invariants after every step.
        assert_eq!(pool.len(), live.len(), "pool size vs live connections");
        for &c in &live {
            let id = PooledId(c);
            let n = pool.allocations(id).expect("a live connection is pooled");
            assert_eq!(n, held.get(&c).copied().unwrap_or(0), "{c}: count vs holders");
        }
        for &c in &closed {
            assert!(pool.get(PooledId(c)).is_none(), "closed {c} came back");
        }
        assert!(pool.idle_count() <= pool.len());
    }
});

fn decrement(held: &mut BTreeMap<u64, u32>, c: u64) {
    if let Some(n) = held.get_mut(&c) {
        *n -= 1;
        if *n == 0 {
            held.remove(&c);
        }
    }
}
