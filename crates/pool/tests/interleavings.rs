//! Exhaustive interleavings of acquire, release, put and evict.
//!
//! The driver runs every pool operation under one lock, so concurrency reduces to the order
//! in which whole operations happen. This test runs every order of a few small scripts (two
//! callers that acquire and release, one that puts a new connection, one evictor that runs
//! cleanup and `evict_idle`, one that marks a connection broken), with time moving on at
//! every step, and checks after each step that:
//!
//! - no connection carries more exchanges than its limit;
//! - an acquired id is live, and was never closed before;
//! - a closed connection never comes back;
//! - the exchanges the pool counts are exactly the ones the callers hold;
//!
//! and at the end that every connection is accounted for: live in the pool or closed once.

use std::collections::BTreeSet;
use std::time::Duration;

use fastfallback_pool::{ConnectionPool, PoolConfig, PoolKey, Release};
use fastfallback_proto::{Instant, PooledId, Protocol};

#[derive(Clone, Copy, Debug)]
enum Step {
    Acquire,
    Release,
    Put,
    Cleanup,
    EvictIdle,
    MarkFirst,
}

/// One actor: its script, and what it holds.
#[derive(Clone, Debug)]
struct Actor {
    script: &'static [Step],
    pc: usize,
    held: Option<PooledId>,
}

#[derive(Clone)]
struct World {
    pool: ConnectionPool<u64>,
    actors: Vec<Actor>,
    now: u64,
    next_conn: u64,
    protocol: Protocol,
    closed: BTreeSet<u64>,
    inserted: BTreeSet<u64>,
}

fn key() -> PoolKey {
    PoolKey::new("example.com", 443, true)
}

impl World {
    fn new(protocol: Protocol, preloaded: usize, scripts: &[&'static [Step]]) -> Self {
        let mut w = Self {
            pool: ConnectionPool::new(PoolConfig {
                keep_alive: Duration::from_millis(100),
                max_idle: 1,
            }),
            actors: scripts
                .iter()
                .map(|s| Actor {
                    script: s,
                    pc: 0,
                    held: None,
                })
                .collect(),
            now: 0,
            next_conn: 1,
            protocol,
            closed: BTreeSet::new(),
            inserted: BTreeSet::new(),
        };
        for _ in 0..preloaded {
            w.put();
        }
        w
    }

    fn put(&mut self) {
        let conn = self.next_conn;
        self.next_conn += 1;
        let id = self.pool.insert(
            key(),
            conn,
            self.protocol,
            2,
            Instant::from_millis(self.now),
        );
        assert_eq!(id.0, conn);
        self.inserted.insert(conn);
    }

    fn close(&mut self, conns: impl IntoIterator<Item = u64>) {
        for c in conns {
            assert!(self.closed.insert(c), "connection {c} closed twice");
            assert!(self.inserted.contains(&c));
        }
    }

    /// Runs actor `i`'s next step.
    fn step(&mut self, i: usize) {
        let t = Instant::from_millis(self.now);
        let step = self.actors[i].script[self.actors[i].pc];
        self.actors[i].pc += 1;
        match step {
            Step::Acquire => {
                if let Some(id) = self.pool.acquire(&key(), t) {
                    assert!(!self.closed.contains(&id.0), "closed {id} handed out");
                    assert!(self.pool.get(id).is_some());
                    self.actors[i].held = Some(id);
                }
            }
            Step::Release => {
                if let Some(id) = self.actors[i].held.take() {
                    match self.pool.release(id, t) {
                        Release::Close(c) => self.close([c]),
                        Release::Released => {}
                        Release::Ignored => panic!("a held exchange on {id} was not counted"),
                    }
                }
            }
            Step::Put => self.put(),
            Step::Cleanup => {
                let c = self.pool.cleanup(t);
                self.close(c.closed);
            }
            Step::EvictIdle => {
                let closed = self.pool.evict_idle();
                self.close(closed);
            }
            Step::MarkFirst => {
                self.pool.mark_no_new_exchanges(PooledId(1));
            }
        }
        // Time moves on: some orders see connections expire.
        self.now += 40;
        self.check();
    }

    fn check(&self) {
        let mut held = std::collections::BTreeMap::<u64, u32>::new();
        for a in &self.actors {
            if let Some(id) = a.held {
                *held.entry(id.0).or_default() += 1;
            }
        }
        for &c in &self.inserted {
            let id = PooledId(c);
            match self.pool.allocations(id) {
                Some(n) => {
                    assert!(!self.closed.contains(&c), "closed {c} is still pooled");
                    assert!(
                        n <= self.pool.allocation_limit(id).unwrap_or(0),
                        "{c} over limit"
                    );
                    assert_eq!(
                        n,
                        held.get(&c).copied().unwrap_or(0),
                        "{c}: count ≠ holders"
                    );
                }
                None => assert!(
                    self.closed.contains(&c) && !held.contains_key(&c),
                    "{c} vanished without being closed, or while held"
                ),
            }
        }
    }

    fn done(&self) -> bool {
        self.actors.iter().all(|a| a.pc == a.script.len())
    }
}

/// Runs every interleaving of the actors' scripts; returns how many there were.
fn explore(w: &World) -> usize {
    if w.done() {
        assert!(w.actors.iter().all(|a| a.held.is_none()));
        let live = w.inserted.len() - w.closed.len();
        assert_eq!(w.pool.len(), live, "every connection pooled or closed once");
        return 1;
    }
    let mut runs = 0;
    for i in 0..w.actors.len() {
        if w.actors[i].pc < w.actors[i].script.len() {
            let mut next = w.clone();
            next.step(i);
            runs += explore(&next);
        }
    }
    runs
}

const CALLER: &[Step] = &[Step::Acquire, Step::Release];
const TWICE: &[Step] = &[Step::Acquire, Step::Release, Step::Acquire, Step::Release];
const PUTTER: &[Step] = &[Step::Put];
const EVICTOR: &[Step] = &[Step::Cleanup, Step::EvictIdle];
const BREAKER: &[Step] = &[Step::MarkFirst];

#[test]
fn every_order_of_acquire_release_put_and_evict_keeps_the_books_http1() {
    let w = World::new(
        Protocol::Http11,
        1,
        &[TWICE, CALLER, PUTTER, EVICTOR, BREAKER],
    );
    // 10 steps in scripts of 4, 2, 1, 2, 1: 10! / (4! 2! 2!) orders.
    assert_eq!(explore(&w), 37800);
}

#[test]
fn every_order_of_acquire_release_put_and_evict_keeps_the_books_http2() {
    let w = World::new(
        Protocol::Http2,
        1,
        &[CALLER, CALLER, CALLER, PUTTER, EVICTOR],
    );
    // 9 steps in scripts of 2, 2, 2, 1, 2: 9! / (2! 2! 2! 1! 2!) orders.
    assert_eq!(explore(&w), 22680);
}

#[test]
fn every_order_from_an_empty_pool_keeps_the_books() {
    for protocol in [Protocol::Http11, Protocol::Http2] {
        let w = World::new(
            protocol,
            0,
            &[CALLER, CALLER, PUTTER, PUTTER, EVICTOR, BREAKER],
        );
        // 9 steps in scripts of 2, 2, 1, 1, 2, 1: 9! / (2! 2! 2!) orders.
        assert_eq!(explore(&w), 45360);
    }
}
