//! Exhaustive interleavings of acquire, release, put and evict, and of the races that watch
//! the pool.
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
//!
//! The `offers` module below does the same with races watching the pool (`RaceBoard`):
//! registering, resolving, winning, failing and being dropped, among the pool's operations.

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
        check_connections(
            &self.pool,
            &self.inserted,
            |c| self.closed.contains(&c),
            self.actors.iter().filter_map(|a| a.held),
        );
    }

    fn done(&self) -> bool {
        self.actors.iter().all(|a| a.pc == a.script.len())
    }
}

/// The checks after every step, shared by both worlds: no connection carries more exchanges
/// than its limit; a pooled connection was never closed and counts exactly the exchanges its
/// holders hold; a connection gone from the pool was closed and is held by no one.
fn check_connections<'a>(
    pool: &ConnectionPool<u64>,
    inserted: impl IntoIterator<Item = &'a u64>,
    closed: impl Fn(u64) -> bool,
    holders: impl Iterator<Item = PooledId>,
) {
    let mut held = std::collections::BTreeMap::<u64, u32>::new();
    for id in holders {
        *held.entry(id.0).or_default() += 1;
    }
    for &c in inserted {
        let id = PooledId(c);
        match pool.allocations(id) {
            Some(n) => {
                assert!(!closed(c), "closed {c} is still pooled");
                assert!(
                    n <= pool.allocation_limit(id).unwrap_or(0),
                    "{c} over limit"
                );
                assert_eq!(
                    n,
                    held.get(&c).copied().unwrap_or(0),
                    "{c}: count ≠ holders"
                );
            }
            None => assert!(
                closed(c) && !held.contains_key(&c),
                "{c} vanished without being closed, or while held"
            ),
        }
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

/// Exhaustive interleavings of the races that watch the pool (`RaceBoard`) with the pool's
/// own operations.
///
/// Actors: races that register (checking the pool out first, as the driver does under the
/// same lock), resolve their host's address, end (win on their own connection or on an offer,
/// fail, or are dropped) and release what they hold; a caller that acquires and releases; a
/// putter; an evictor; a breaker that marks connection 1 and reports it retired. The board's
/// decisions are carried out as the driver does: an offer goes to its race, which holds the
/// exchange; a release starts a waiting race; an exchange given back is offered again. After
/// every step:
///
/// - a race is never offered a connection after it stopped watching, nor twice, and a release
///   goes only to a watching race that waits;
/// - no connection carries more exchanges than its limit, and every exchange counted is held
///   by exactly one actor (offered streams included);
/// - the board holds exactly the races that watch, and knows which of them wait;
/// - no watching race is left while a connection of its key has a free exchange;
/// - no waiting race is stranded: a connect is in flight for its key (led by another race),
///   or an HTTP/2 connection of its key takes exchanges (a stream will be offered as one
///   frees up);
///
/// and at the end that no race watches and no flight is left.
mod offers {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::Duration;

    use fastfallback_pool::{
        ConnectionPool, Landing, OfferTo, PoolConfig, PoolKey, ProtocolMemory, RaceBoard, RaceId,
        Release, ReleaseTo,
    };
    use fastfallback_proto::{Instant, PooledId, Protocol};

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Step {
        /// Check the pool out, else register a race (single flight unless the key is known to
        /// speak HTTP/1).
        Watch,
        /// The race's DNS answered its host's address; a coalescing proposal is offered
        /// (certificates always cover the host here).
        Resolve,
        /// The race ends on the connection it was offered, else on its own new one (a waiting
        /// race has none: its deadline passes, it fails).
        Win,
        /// The race fails.
        Fail,
        /// The call is dropped: an offered exchange is given back.
        Drop,
        /// The exchange held ends.
        Release,
        /// A caller checks out without racing.
        Acquire,
        /// A new idle connection for "a.example" enters the pool.
        Put,
        Cleanup,
        EvictIdle,
        /// Connection 1 takes no new exchanges (a GOAWAY).
        MarkFirst,
    }

    const A: &str = "a.example";
    const B: &str = "b.example";
    /// Where a.example's connections go; b.example resolves it too, so they may coalesce.
    const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    fn key(host: &str) -> PoolKey {
        PoolKey::new(host, 443, true)
    }

    #[derive(Clone, Debug)]
    struct Actor {
        script: &'static [Step],
        pc: usize,
        host: &'static str,
        /// Its id on the board, once registered.
        race: Option<RaceId>,
        /// On the board now.
        watching: bool,
        /// Waits for another call's connect (as the driver last told it).
        waiting: bool,
        /// The exchange it holds: checked out, offered, or on its own new connection.
        held: Option<PooledId>,
        /// It was offered a connection.
        offered: bool,
        ended: bool,
    }

    #[derive(Clone)]
    struct World {
        pool: ConnectionPool<u64>,
        board: RaceBoard<usize>,
        protocols: ProtocolMemory,
        actors: Vec<Actor>,
        protocol: Protocol,
        now: u64,
        next_conn: u64,
        inserted: Vec<u64>,
        closed: Vec<u64>,
    }

    impl World {
        fn new(protocol: Protocol, scripts: &[(&'static str, &'static [Step])]) -> Self {
            Self {
                pool: ConnectionPool::new(PoolConfig {
                    // No connection expires: every idle one can serve (see `check`).
                    keep_alive: Duration::from_secs(3600),
                    max_idle: 1,
                }),
                board: RaceBoard::default(),
                protocols: ProtocolMemory::new(8),
                actors: scripts
                    .iter()
                    .map(|&(host, script)| Actor {
                        script,
                        pc: 0,
                        host,
                        race: None,
                        watching: false,
                        waiting: false,
                        held: None,
                        offered: false,
                        ended: false,
                    })
                    .collect(),
                protocol,
                now: 0,
                next_conn: 1,
                inserted: Vec::new(),
                closed: Vec::new(),
            }
        }

        fn t(&self) -> Instant {
            Instant::from_millis(self.now)
        }

        /// A new connection for `host` (two streams on HTTP/2), offered to the races watching
        /// its key and proposed to those that may coalesce onto it.
        fn insert(&mut self, host: &str, taken_by: Option<usize>) -> PooledId {
            let conn = self.next_conn;
            self.next_conn += 1;
            let id = self
                .pool
                .insert(key(host), conn, self.protocol, 2, self.t());
            assert_eq!(id.0, conn);
            self.inserted.push(conn);
            let ip = if host == A { IP_A } else { IP_B };
            self.pool.set_peer(id, SocketAddr::new(ip, 443));
            if let Some(i) = taken_by {
                assert!(self.pool.acquire_id(id));
                self.actors[i].held = Some(id);
            }
            self.protocols.remember(&key(host), self.protocol);
            let offers = self.board.offer_capacity(&mut self.pool, id);
            self.deliver(offers);
            id
        }

        fn coalesce(&mut self, id: PooledId) {
            for p in self.board.coalescable(&self.pool, id) {
                let offer = self.board.offer(&mut self.pool, p.race, p.id);
                self.deliver(offer);
            }
        }

        fn deliver(&mut self, offers: impl IntoIterator<Item = OfferTo<usize>>) {
            for o in offers {
                let a = &mut self.actors[o.payload];
                assert_eq!(a.race, Some(o.race));
                assert!(
                    a.watching && !a.ended,
                    "{} offered after it unwatched",
                    o.race
                );
                assert!(!a.offered && a.held.is_none(), "{} offered twice", o.race);
                a.watching = false;
                a.waiting = false;
                a.offered = true;
                a.held = Some(o.id);
            }
        }

        fn start(&mut self, releases: impl IntoIterator<Item = ReleaseTo>) {
            for r in releases {
                let i = *self.board.get(r.race).expect("released races are watching");
                let a = &mut self.actors[i];
                assert!(
                    a.watching && a.waiting,
                    "{} released but not waiting",
                    r.race
                );
                a.waiting = false;
            }
        }

        /// Gives back or ends the exchange actor `i` holds.
        fn release(&mut self, i: usize) {
            let Some(id) = self.actors[i].held.take() else {
                return;
            };
            match self.pool.release(id, self.t()) {
                Release::Released => {
                    let offers = self.board.offer_capacity(&mut self.pool, id);
                    self.deliver(offers);
                }
                Release::Close(c) => self.close([c]),
                Release::Ignored => panic!("a held exchange on {id} was not counted"),
            }
        }

        fn close(&mut self, conns: impl IntoIterator<Item = u64>) {
            for c in conns {
                assert!(!self.closed.contains(&c), "connection {c} closed twice");
                self.closed.push(c);
            }
        }

        /// The race of actor `i` stops watching and lands its flight, if it leads one.
        fn end(&mut self, i: usize, landing: Landing) {
            let a = &mut self.actors[i];
            a.ended = true;
            let Some(race) = a.race else {
                return;
            };
            if a.watching {
                assert_eq!(self.board.unwatch(race), Some(i));
                a.watching = false;
                a.waiting = false;
            }
            let host = a.host;
            let releases = self.board.land(&self.pool, &key(host), race, landing);
            self.start(releases);
        }

        fn step(&mut self, i: usize) {
            let step = self.actors[i].script[self.actors[i].pc];
            self.actors[i].pc += 1;
            let k = key(self.actors[i].host);
            match step {
                Step::Watch | Step::Acquire => {
                    if let Some(id) = self.pool.acquire(&k, self.t()) {
                        self.actors[i].held = Some(id);
                    } else if step == Step::Watch {
                        let single_flight = self.protocols.get(&k) != Some(Protocol::Http11);
                        let w = self.board.watch(k, single_flight, i);
                        let a = &mut self.actors[i];
                        (a.race, a.watching, a.waiting) = (Some(w.race), true, w.waits());
                    }
                }
                Step::Resolve => {
                    if let Some(race) = self.actors[i].race.filter(|_| self.actors[i].watching) {
                        let ip = if self.actors[i].host == A { IP_A } else { IP_B };
                        for p in self.board.resolved(&self.pool, race, &[ip, IP_A]) {
                            let offer = self.board.offer(&mut self.pool, p.race, p.id);
                            if offer.is_some() {
                                self.deliver(offer);
                                break;
                            }
                        }
                    }
                }
                Step::Win => {
                    let a = &self.actors[i];
                    match a.race {
                        None => self.end(i, Landing::Connected),
                        Some(_) if a.offered => self.end(i, Landing::Connected),
                        Some(_) if a.waiting => self.end(i, Landing::Failed),
                        Some(race) => {
                            // As the driver's `put`: unwatch, pool the connection, land.
                            assert_eq!(self.board.unwatch(race), Some(i));
                            self.actors[i].watching = false;
                            let host = self.actors[i].host;
                            let id = self.insert(host, Some(i));
                            self.end(i, Landing::Connected);
                            self.coalesce(id);
                        }
                    }
                }
                Step::Fail => {
                    self.end(i, Landing::Failed);
                    self.release(i);
                }
                Step::Drop => {
                    self.end(i, Landing::Dropped);
                    self.release(i);
                }
                Step::Release => self.release(i),
                Step::Put => {
                    let id = self.insert(A, None);
                    self.coalesce(id);
                }
                Step::Cleanup => {
                    let c = self.pool.cleanup(self.t());
                    self.close(c.closed);
                }
                Step::EvictIdle => {
                    let closed = self.pool.evict_idle();
                    self.close(closed);
                }
                Step::MarkFirst => {
                    if self.pool.mark_no_new_exchanges(PooledId(1)) {
                        let release = self.board.retired(&self.pool, PooledId(1));
                        self.start(release);
                    }
                }
            }
            self.now += 40;
            self.check();
        }

        fn check(&self) {
            super::check_connections(
                &self.pool,
                &self.inserted,
                |c| self.closed.contains(&c),
                self.actors.iter().filter_map(|a| a.held),
            );
            let mut expected: Vec<RaceId> = self
                .actors
                .iter()
                .filter(|a| a.watching)
                .filter_map(|a| a.race)
                .collect();
            expected.sort();
            let on_board: Vec<RaceId> = self.board.races().collect();
            assert_eq!(
                on_board, expected,
                "the board holds exactly the watching races"
            );
            for a in self.actors.iter().filter(|a| a.watching) {
                let race = a.race.expect("registered");
                let k = key(a.host);
                assert_eq!(
                    self.board.is_waiting(race),
                    Some(a.waiting),
                    "{race} waiting"
                );
                for &c in &self.inserted {
                    let id = PooledId(c);
                    let free = self.pool.key(id) == Some(&k)
                        && self.pool.takes_new_exchanges(id) == Some(true)
                        && self.pool.allocations(id) < self.pool.allocation_limit(id);
                    assert!(
                        !free,
                        "{race} watches while connection {c} of its key is free"
                    );
                }
                if a.waiting {
                    assert!(
                        self.board.leader(&k).is_some() || self.pool.multiplexes(&k),
                        "{race} waits with no connect in flight and no HTTP/2 connection"
                    );
                    assert_ne!(self.board.leader(&k), Some(race), "{race} waits for itself");
                }
            }
        }

        fn done(&self) -> bool {
            self.actors.iter().all(|a| a.pc == a.script.len())
        }
    }

    fn explore(w: &World) -> usize {
        if w.done() {
            assert!(w.actors.iter().all(|a| a.held.is_none() && !a.watching));
            assert!(w.board.is_empty(), "no race left watching");
            assert_eq!(w.board.flights(), 0, "no flight left in the air");
            assert_eq!(w.pool.len(), w.inserted.len() - w.closed.len());
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

    const WINS: &[Step] = &[Step::Watch, Step::Win, Step::Release];
    const FAILS: &[Step] = &[Step::Watch, Step::Fail, Step::Release];
    const DROPPED: &[Step] = &[Step::Watch, Step::Drop, Step::Release];
    const COALESCES: &[Step] = &[Step::Watch, Step::Resolve, Step::Win, Step::Release];
    const CALLER: &[Step] = &[Step::Acquire, Step::Release];
    const PUTTER: &[Step] = &[Step::Put];
    const EVICTOR: &[Step] = &[Step::Cleanup, Step::EvictIdle];
    const BREAKER: &[Step] = &[Step::MarkFirst];

    #[test]
    fn every_order_of_single_flight_races_keeps_the_offers_and_releases_straight() {
        for protocol in [Protocol::Http11, Protocol::Http2] {
            for ends in [
                [WINS, WINS, WINS],
                [DROPPED, WINS, FAILS],
                [FAILS, DROPPED, WINS],
            ] {
                let w = World::new(
                    protocol,
                    &[(A, ends[0]), (A, ends[1]), (A, ends[2]), (A, BREAKER)],
                );
                // 10 steps in scripts of 3, 3, 3, 1: 10! / (3! 3! 3!) orders.
                assert_eq!(explore(&w), 16800);
            }
        }
    }

    #[test]
    fn every_order_of_races_callers_and_coalescing_keeps_the_offers_straight() {
        for b_ends in [
            COALESCES,
            &[Step::Watch, Step::Resolve, Step::Drop, Step::Release],
        ] {
            let w = World::new(
                Protocol::Http2,
                &[(B, b_ends), (A, WINS), (A, PUTTER), (A, CALLER)],
            );
            // 10 steps in scripts of 4, 3, 1, 2: 10! / (4! 3! 2!) orders.
            assert_eq!(explore(&w), 12600);
        }
    }

    #[test]
    fn every_order_of_races_with_puts_evictions_and_a_goaway_keeps_the_offers_straight() {
        for protocol in [Protocol::Http11, Protocol::Http2] {
            let w = World::new(
                protocol,
                &[
                    (A, WINS),
                    (A, DROPPED),
                    (A, PUTTER),
                    (A, EVICTOR),
                    (A, BREAKER),
                ],
            );
            // 10 steps in scripts of 3, 3, 1, 2, 1: 10! / (3! 3! 2!) orders.
            assert_eq!(explore(&w), 50400);
        }
    }
}
