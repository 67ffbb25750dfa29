//! Property test: random sequences of pool operations checked against a plain model.

use std::collections::BTreeMap;
use std::time::Duration;

use fastfallback_pool::{ConnectionPool, PoolConfig, PoolKey, Release};
use fastfallback_proto::{Instant, PooledId, Protocol};
use proptest::prelude::*;

const KEEP_ALIVE_MS: u64 = 100;
const MAX_IDLE: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Insert {
        key: u8,
        http2: bool,
        max_streams: u32,
    },
    Acquire {
        key: u8,
    },
    Release {
        pick: usize,
    },
    Cleanup,
    Advance {
        ms: u64,
    },
    SetMaxStreams {
        pick: usize,
        n: u32,
    },
    MarkNoNewExchanges {
        pick: usize,
    },
    Remove {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, any::<bool>(), 0u32..4)
            .prop_map(|(key, http2, max_streams)| Op::Insert { key, http2, max_streams }),
        6 => (0u8..3).prop_map(|key| Op::Acquire { key }),
        5 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        2 => Just(Op::Cleanup),
        2 => (0u64..80).prop_map(|ms| Op::Advance { ms }),
        1 => (any::<usize>(), 0u32..4).prop_map(|(pick, n)| Op::SetMaxStreams { pick, n }),
        1 => any::<usize>().prop_map(|pick| Op::MarkNoNewExchanges { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Remove { pick }),
    ]
}

fn pool_key(k: u8) -> PoolKey {
    PoolKey::new(format!("host{k}"), 443, true)
}

/// What the test knows about one live connection.
#[derive(Debug)]
struct Model {
    key: u8,
    multiplexed: bool,
    limit: u32,
    allocations: u32,
    idle_since: u64,
    retired: bool,
}

/// A live id chosen by `pick`, or an id that was never handed out when none is live.
fn choose(live: &BTreeMap<u64, Model>, pick: usize) -> PooledId {
    if live.is_empty() {
        PooledId(u64::MAX)
    } else {
        PooledId(*live.keys().nth(pick % live.len()).expect("in range"))
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let keep_alive = Duration::from_millis(KEEP_ALIVE_MS);
    // Each connection's handle is its own id number, so closed handles name their ids.
    let mut pool: ConnectionPool<u64> = ConnectionPool::new(PoolConfig {
        keep_alive,
        max_idle: MAX_IDLE,
    });
    let mut live: BTreeMap<u64, Model> = BTreeMap::new();
    let mut gone: Vec<u64> = Vec::new();
    let mut now = 0u64;
    let mut next_conn = 1u64;

    for op in ops {
        let t = Instant::from_millis(now);
        match op {
            Op::Insert {
                key,
                http2,
                max_streams,
            } => {
                let protocol = if http2 {
                    Protocol::Http2
                } else {
                    Protocol::Http11
                };
                let id = pool.insert(pool_key(key), next_conn, protocol, max_streams, t);
                prop_assert_eq!(id, PooledId(next_conn), "ids count up from 1");
                next_conn += 1;
                let limit = match (http2, max_streams) {
                    (false, _) => 1,
                    (true, 0) => 100,
                    (true, n) => n,
                };
                let m = Model {
                    key,
                    multiplexed: http2,
                    limit,
                    allocations: 0,
                    idle_since: now,
                    retired: false,
                };
                prop_assert!(live.insert(id.0, m).is_none());
            }
            Op::Acquire { key } => {
                let usable = |m: &Model| {
                    let expired = m.allocations == 0 && now - m.idle_since >= KEEP_ALIVE_MS;
                    m.key == key && !m.retired && m.allocations < m.limit && !expired
                };
                let any_multiplexed = live.values().any(|m| usable(m) && m.multiplexed);
                let latest_http1 = live
                    .values()
                    .filter(|m| usable(m) && !m.multiplexed)
                    .map(|m| m.idle_since)
                    .max();
                match pool.acquire(&pool_key(key), t) {
                    Some(id) => {
                        prop_assert!(!gone.contains(&id.0), "acquire returned closed {:?}", id);
                        let m = live.get_mut(&id.0).expect("acquire returned an unknown id");
                        prop_assert!(usable(m), "acquire returned unusable {:?}: {:?}", id, m);
                        if m.multiplexed {
                            prop_assert!(m.allocations < m.limit);
                        } else {
                            prop_assert!(!any_multiplexed, "HTTP/1 chosen over HTTP/2");
                            prop_assert_eq!(Some(m.idle_since), latest_http1, "not LIFO");
                        }
                        m.allocations += 1;
                        prop_assert!(m.allocations <= m.limit, "allocations exceed limit");
                    }
                    None => {
                        prop_assert!(!live.values().any(usable), "a usable connection was missed")
                    }
                }
            }
            Op::Release { pick } => {
                let id = choose(&live, pick);
                let outcome = pool.release(id, t);
                match live.get_mut(&id.0) {
                    None => prop_assert_eq!(outcome, Release::Ignored),
                    Some(m) if m.allocations == 0 => prop_assert_eq!(outcome, Release::Ignored),
                    Some(m) if m.allocations == 1 && m.retired => {
                        prop_assert_eq!(outcome, Release::Close(id.0));
                        live.remove(&id.0);
                        gone.push(id.0);
                    }
                    Some(m) => {
                        prop_assert_eq!(outcome, Release::Released);
                        m.allocations -= 1;
                        if m.allocations == 0 {
                            m.idle_since = now;
                        }
                    }
                }
            }
            Op::Cleanup => {
                let mut expected_closed: Vec<u64> = live
                    .iter()
                    .filter(|(_, m)| m.allocations == 0 && m.retired)
                    .map(|(&id, _)| id)
                    .collect();
                for id in &expected_closed {
                    live.remove(id);
                }
                let idle: Vec<(u64, u64)> = live
                    .iter()
                    .filter(|(_, m)| m.allocations == 0)
                    .map(|(&id, m)| (id, now - m.idle_since))
                    .collect();
                let in_use = live.len() - idle.len();
                // Longest idle; the lowest id wins ties.
                let longest = idle
                    .iter()
                    .copied()
                    .min_by_key(|&(id, d)| (u64::MAX - d, id));
                let expected_next = match longest {
                    Some((id, d)) if d >= KEEP_ALIVE_MS || idle.len() > MAX_IDLE => {
                        live.remove(&id);
                        expected_closed.push(id);
                        Some(Duration::ZERO)
                    }
                    Some((_, d)) => Some(Duration::from_millis(KEEP_ALIVE_MS - d)),
                    None if in_use > 0 => Some(keep_alive),
                    None => None,
                };
                let c = pool.cleanup(t);
                prop_assert_eq!(&c.closed, &expected_closed);
                prop_assert_eq!(c.next_run, expected_next);
                gone.extend(expected_closed);
            }
            Op::Advance { ms } => now += ms,
            Op::SetMaxStreams { pick, n } => {
                let id = choose(&live, pick);
                let known = pool.set_max_streams(id, n);
                prop_assert_eq!(known, live.contains_key(&id.0));
                if let Some(m) = live.get_mut(&id.0)
                    && m.multiplexed
                {
                    m.limit = n;
                }
            }
            Op::MarkNoNewExchanges { pick } => {
                let id = choose(&live, pick);
                prop_assert_eq!(pool.mark_no_new_exchanges(id), live.contains_key(&id.0));
                if let Some(m) = live.get_mut(&id.0) {
                    m.retired = true;
                }
            }
            Op::Remove { pick } => {
                let id = choose(&live, pick);
                let expected = live.remove(&id.0).map(|_| id.0);
                prop_assert_eq!(pool.remove(id), expected);
                gone.extend(expected);
            }
        }

        // The pool agrees with the model after every step.
        prop_assert_eq!(pool.len(), live.len());
        let idle = live
            .values()
            .filter(|m| m.allocations == 0 && !m.retired)
            .count();
        prop_assert_eq!(pool.idle_count(), idle);
        for (&id, m) in &live {
            let id = PooledId(id);
            prop_assert_eq!(pool.allocations(id), Some(m.allocations));
            prop_assert_eq!(pool.allocation_limit(id), Some(m.limit));
            prop_assert_eq!(pool.get(id), Some(&id.0));
            prop_assert_eq!(pool.key(id), Some(&pool_key(m.key)));
        }
        for &id in &gone {
            prop_assert_eq!(pool.get(PooledId(id)), None);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No acquire pushes a connection past its allocation limit, and a connection that was
    /// closed or removed never comes back; every answer matches the model.
    #[test]
    fn allocations_never_exceed_limit(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}
