//! The races watching the pool: which race is offered which connection, and which waiting
//! races are released.
//!
//! A race run for the pool does not only connect: it watches the pool for a connection that
//! could end it sooner. One enters the pool for its key (another call won first), or an
//! exchange on one ends, or the race learns its host's addresses and an HTTP/2 connection to
//! one of them may be coalesced for it. And a race that follows another call's connect (single
//! flight, [`Flights`]) waits until that connect lands, then shares its HTTP/2 connection or
//! is released to race on its own.
//!
//! [`RaceBoard`] keeps that bookkeeping. It never sends anything: every method hands back
//! what the driver must do, as values ([`OfferTo`], [`ReleaseTo`], [`Coalesce`]), and the
//! driver carries it out (sends the offer on its channel, tells the race to start).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use fastfallback_proto::PooledId;

use crate::{ConnectionPool, Flights, Join, PoolKey};

/// Names a race on a [`RaceBoard`]. The board hands ids out in registration order, so the
/// smaller id registered first.
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct RaceId(pub u64);

impl fmt::Display for RaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "race {}", self.0)
    }
}

/// How a race joined the board ([`RaceBoard::watch`]).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Watching {
    /// Its id.
    pub race: RaceId,
    /// Its part in its key's single flight: it leads the connect, or follows one in flight
    /// and waits; `None` when it takes no part (it races on its own).
    pub join: Option<Join>,
}

impl Watching {
    /// Whether the race starts waiting (it follows another call's connect) instead of racing.
    pub fn waits(&self) -> bool {
        self.join == Some(Join::Follow)
    }
}

/// One exchange reserved for a race: the driver must send `id` to `race`.
///
/// The exchange is already counted against `id` in the [`ConnectionPool`], and the race has
/// left the board (it is offered one connection at most), so its payload comes back with the
/// offer. If the race cannot take it any more (it ended meanwhile), the driver releases the
/// exchange on `id` and asks [`RaceBoard::offer_capacity`] again.
#[derive(Clone, Debug, Eq, PartialEq)]
#[must_use = "an `OfferTo` holds an exchange the driver must send or release"]
pub struct OfferTo<T> {
    /// The race offered the connection.
    pub race: RaceId,
    /// The connection, with one exchange counted for the race.
    pub id: PooledId,
    /// What the driver keeps with the race (its channel, say).
    pub payload: T,
}

/// A waiting race must start connecting: the driver tells it so. It stays on the board and
/// keeps watching.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
#[must_use = "a `ReleaseTo` names a waiting race the driver must release"]
pub struct ReleaseTo {
    /// The race.
    pub race: RaceId,
    /// It leads its key's flight now: it takes a dropped leader's connect over, or makes the
    /// connect its fellow waiters wait for. There is nothing to learn from. When `false`, the
    /// flight it followed landed without a connection to share (HTTP/1, or it failed): it
    /// races with the landed leader's lessons.
    pub lead: bool,
}

/// How the race leading a flight ended ([`RaceBoard::land`]).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Landing {
    /// It has a connection (new or offered), which may or may not be shared.
    Connected,
    /// It failed.
    Failed,
    /// Its call was dropped before the race ended.
    Dropped,
}

/// An offer the driver may make once it has checked that connection `id`'s certificate
/// covers `host` ([`RaceBoard::offer`]). Every other condition of coalescing holds (see
/// [`ConnectionPool::coalescing_candidates`]).
///
/// RFC 9113 §9.1.1: a connection may be reused for a host whose name the certificate covers
/// and that resolves to the connection's address; the certificate check needs the TLS stack,
/// so it is the driver's.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Coalesce {
    /// The race that may be offered the connection.
    pub race: RaceId,
    /// The HTTP/2 connection, made for another host.
    pub id: PooledId,
    /// The race's host, which the certificate must cover.
    pub host: String,
}

/// One race on the board.
#[derive(Clone, Debug)]
struct Race<T> {
    key: PoolKey,
    /// It waits for another call's connect (or for a free stream) and starts connecting only
    /// when released.
    waiting: bool,
    /// What its DNS answered so far (A and AAAA), for coalescing.
    resolved: Vec<IpAddr>,
    payload: T,
}

/// The races that watch the pool for a connection, and the single flights they make: which
/// race is offered which connection, and which waiting races are released.
///
/// `T` is what the driver keeps with each race (the channel its offers go on). The board
/// reads and counts exchanges on a [`ConnectionPool`] the caller passes in, and hands its
/// decisions back; it performs no I/O. Rules:
///
/// - **Same key.** When a connection gains free capacity (it was inserted, an exchange on it
///   ended, the peer raised its HTTP/2 stream limit), each free exchange is reserved for one
///   race watching its key, oldest race first ([`Self::offer_capacity`]). HTTP/2 connections
///   are shared by all exchanges to their origin (RFC 9113 §9.1); an HTTP/1 connection carries
///   one at a time.
/// - **Coalescing.** A race that resolved one of an HTTP/2 connection's addresses for another
///   host of the same port and TLS setup may be offered it, once the driver has checked its
///   certificate covers the race's host (RFC 9113 §9.1.1; [`Self::resolved`],
///   [`Self::coalescable`], then [`Self::offer`]).
/// - **One offer per race.** An offered race leaves the board: it ends on the connection.
/// - **Single flight.** A race registered for single flight leads its key's connect if none
///   is in flight, else follows it and waits ([`Self::watch`]). When the leader lands
///   ([`Self::land`]) with an HTTP/2 connection taking exchanges, the followers keep waiting
///   for streams on it; on HTTP/1 or a failure they are released; a dropped leader hands the
///   connect to its first follower. When the last HTTP/2 connection of a key stops taking
///   exchanges with races still waiting for a stream, the first of them leads a new connect
///   and the others follow it ([`Self::retired`]).
///
/// ```
/// use fastfallback_pool::{ConnectionPool, Landing, PoolConfig, PoolKey, RaceBoard, ReleaseTo};
/// use fastfallback_proto::{Instant, Protocol};
///
/// let key = PoolKey::new("example.com", 443, true);
/// let mut pool = ConnectionPool::new(PoolConfig::default());
/// let mut board = RaceBoard::default();
///
/// // Two calls find nothing pooled: the first leads the connect, the second waits for it.
/// let lead = board.watch(key.clone(), true, "first");
/// let wait = board.watch(key.clone(), true, "second");
/// assert!(!lead.waits() && wait.waits());
///
/// // The leader connects over HTTP/2; it stops watching, and its connection is pooled.
/// board.unwatch(lead.race);
/// let h2 = pool.insert(key.clone(), (), Protocol::Http2, 10, Instant::ZERO);
/// assert!(pool.acquire_id(h2)); // the leader's own exchange
///
/// // The waiting race is offered a stream on it, counted already.
/// let offers = board.offer_capacity(&mut pool, h2);
/// assert_eq!(offers.len(), 1);
/// assert_eq!((offers[0].race, offers[0].id, offers[0].payload), (wait.race, h2, "second"));
/// assert_eq!(pool.allocations(h2), Some(2));
///
/// // The flight lands on a shared connection: nobody is released.
/// assert_eq!(board.land(&pool, &key, lead.race, Landing::Connected), Vec::<ReleaseTo>::new());
/// assert!(board.is_empty() && board.flights() == 0);
/// ```
#[derive(Clone, Debug)]
pub struct RaceBoard<T> {
    /// The races watching, by id: registration order.
    races: BTreeMap<RaceId, Race<T>>,
    flights: Flights<RaceId>,
    next: u64,
}

impl<T> Default for RaceBoard<T> {
    fn default() -> Self {
        Self {
            races: BTreeMap::new(),
            flights: Flights::default(),
            next: 0,
        }
    }
}

impl<T> RaceBoard<T> {
    /// Registers a race to `key` that watches the pool, keeping `payload` with it. With
    /// `single_flight` (the driver's choice: the key's protocol is unknown or known to be
    /// HTTP/2, and the option is on) it joins the key's flight: it leads the connect if none
    /// is in flight, else it waits for that one.
    pub fn watch(&mut self, key: PoolKey, single_flight: bool, payload: T) -> Watching {
        let race = RaceId(self.next);
        self.next += 1;
        let join = single_flight.then(|| self.flights.join(&key, || race));
        let race_entry = Race {
            key,
            waiting: join == Some(Join::Follow),
            resolved: Vec::new(),
            payload,
        };
        self.races.insert(race, race_entry);
        Watching { race, join }
    }

    /// The race stops watching (it won, failed or was dropped): it is offered nothing from now
    /// on, and leaves the flight it waits for. Its payload comes back; `None` if it was not
    /// watching (it was offered a connection, or unwatched already). A race leading a flight
    /// still leads it: [`Self::land`] ends the flight.
    pub fn unwatch(&mut self, race: RaceId) -> Option<T> {
        let r = self.races.remove(&race)?;
        if r.waiting {
            self.flights.leave(&r.key, &race);
        }
        Some(r.payload)
    }

    /// Ends the flight for `key` if `race` leads it (else nothing happens), and says which
    /// followers to release:
    ///
    /// - `Connected` or `Dropped` while `key` has an HTTP/2 connection taking exchanges: none;
    ///   the flight ends and its followers keep waiting for a stream, offered as streams free
    ///   up ([`Self::offer_capacity`]);
    /// - `Dropped` otherwise: the first follower takes the connect over (`lead`), the others
    ///   keep following it;
    /// - `Connected` (on HTTP/1) or `Failed`: every follower, to race with the leader's
    ///   lessons.
    ///
    /// Call it after [`Self::unwatch`] and after the leader's connection, if any, entered the
    /// pool.
    pub fn land<C>(
        &mut self,
        pool: &ConnectionPool<C>,
        key: &PoolKey,
        race: RaceId,
        landing: Landing,
    ) -> Vec<ReleaseTo> {
        if self.flights.leader(key) != Some(&race) {
            return Vec::new();
        }
        let shared = pool.multiplexes(key);
        match landing {
            Landing::Connected | Landing::Dropped if shared => {
                self.flights.land(key);
                Vec::new()
            }
            Landing::Dropped => {
                let next = self.flights.hand_over(key);
                next.into_iter()
                    .filter_map(|next| self.start(next, true))
                    .collect()
            }
            Landing::Connected | Landing::Failed => {
                let followers = self.flights.land(key);
                followers
                    .into_iter()
                    .filter_map(|f| self.start(f, false))
                    .collect()
            }
        }
    }

    /// Connection `id` stopped taking new exchanges (an error, a GOAWAY, its task ended): if
    /// races wait for a stream on its key and nothing else can give them one (no HTTP/2
    /// connection of the key takes exchanges, no connect in flight), the first of them leads
    /// a new connect and is released; the others follow it. Call it while `id` is still in
    /// the pool.
    pub fn retired<C>(&mut self, pool: &ConnectionPool<C>, id: PooledId) -> Option<ReleaseTo> {
        if self.races.is_empty() {
            return None;
        }
        let key = pool.key(id)?;
        if self.flights.is_flying(key) || pool.multiplexes(key) {
            return None;
        }
        let waiters: Vec<RaceId> = self
            .races
            .iter()
            .filter(|(_, r)| r.waiting && r.key == *key)
            .map(|(&race, _)| race)
            .collect();
        let (&first, rest) = waiters.split_first()?;
        self.flights.join(key, || first);
        for &w in rest {
            self.flights.join(key, || w);
        }
        self.start(first, true)
    }

    /// Reserves the free exchanges of connection `id` for the races watching its key, one each,
    /// oldest race first, until the connection is full or no such race is left. Each offered
    /// race leaves the board. Call it whenever `id` gains free capacity: inserted, an exchange
    /// released, its stream limit raised.
    pub fn offer_capacity<C>(
        &mut self,
        pool: &mut ConnectionPool<C>,
        id: PooledId,
    ) -> Vec<OfferTo<T>> {
        if self.races.is_empty() {
            return Vec::new();
        }
        let Some(key) = pool.key(id) else {
            return Vec::new();
        };
        let eligible: Vec<RaceId> = self
            .races
            .iter()
            .filter(|(_, r)| r.key == *key)
            .map(|(&race, _)| race)
            .collect();
        let mut offers = Vec::new();
        for race in eligible {
            if !pool.acquire_id(id) {
                break;
            }
            offers.extend(self.take(race, id));
        }
        offers
    }

    /// Race `race` learned `addresses` of its host (its own A and AAAA answers): they are
    /// added to what it resolved, and the HTTP/2 connections it may now be coalesced onto
    /// come back, oldest first, for the driver to check their certificates and
    /// [`Self::offer`] the first that covers the host. Empty if the race is not watching.
    pub fn resolved<C>(
        &mut self,
        pool: &ConnectionPool<C>,
        race: RaceId,
        addresses: &[IpAddr],
    ) -> Vec<Coalesce> {
        let Some(r) = self.races.get_mut(&race) else {
            return Vec::new();
        };
        for a in addresses {
            if !r.resolved.contains(a) {
                r.resolved.push(*a);
            }
        }
        let r = &*r;
        pool.coalescing_candidates(&r.key, &r.resolved)
            .map(|id| Coalesce {
                race,
                id,
                host: r.key.host().to_owned(),
            })
            .collect()
    }

    /// The races HTTP/2 connection `id` may be coalesced for (made for another host, connected
    /// to an address the race resolved, and so on: [`ConnectionPool::coalescing_candidates`]),
    /// oldest race first, for the driver to check the certificate for each race's host and
    /// [`Self::offer`] it. Call it when `id` enters the pool.
    pub fn coalescable<C>(&self, pool: &ConnectionPool<C>, id: PooledId) -> Vec<Coalesce> {
        self.races
            .iter()
            .filter(|(_, r)| !r.resolved.is_empty())
            .filter(|(_, r)| pool.may_coalesce(id, &r.key, &r.resolved))
            .map(|(&race, r)| Coalesce {
                race,
                id,
                host: r.key.host().to_owned(),
            })
            .collect()
    }

    /// Reserves one exchange on `id` for `race`, if the race still watches and `id` has room
    /// (see [`ConnectionPool::acquire_id`]); the race leaves the board. For a [`Coalesce`]
    /// whose certificate the driver checked.
    pub fn offer<C>(
        &mut self,
        pool: &mut ConnectionPool<C>,
        race: RaceId,
        id: PooledId,
    ) -> Option<OfferTo<T>> {
        if !self.races.contains_key(&race) || !pool.acquire_id(id) {
            return None;
        }
        self.take(race, id)
    }

    /// The payload kept with `race`, if it is watching.
    pub fn get(&self, race: RaceId) -> Option<&T> {
        self.races.get(&race).map(|r| &r.payload)
    }

    /// Whether `race` waits (follows a connect, or waits for a stream); `None` if it is not
    /// watching.
    pub fn is_waiting(&self, race: RaceId) -> Option<bool> {
        self.races.get(&race).map(|r| r.waiting)
    }

    /// The key `race` connects to, if it is watching.
    pub fn key(&self, race: RaceId) -> Option<&PoolKey> {
        self.races.get(&race).map(|r| &r.key)
    }

    /// What `race` resolved so far, if it is watching.
    pub fn addresses(&self, race: RaceId) -> Option<&[IpAddr]> {
        self.races.get(&race).map(|r| r.resolved.as_slice())
    }

    /// The race leading `key`'s flight, if a connect is in flight for it.
    pub fn leader(&self, key: &PoolKey) -> Option<RaceId> {
        self.flights.leader(key).copied()
    }

    /// The races watching, oldest first.
    pub fn races(&self) -> impl Iterator<Item = RaceId> + '_ {
        self.races.keys().copied()
    }

    /// How many races watch.
    pub fn len(&self) -> usize {
        self.races.len()
    }

    /// Whether no race watches.
    pub fn is_empty(&self) -> bool {
        self.races.is_empty()
    }

    /// How many flights are in the air (keys whose first connect is in flight).
    pub fn flights(&self) -> usize {
        self.flights.len()
    }

    /// Takes `race` off the board for an offer of `id` (one exchange already counted); a race
    /// that waited for a flight leaves it, so it is never handed the connect.
    fn take(&mut self, race: RaceId, id: PooledId) -> Option<OfferTo<T>> {
        let r = self.races.remove(&race)?;
        if r.waiting {
            self.flights.leave(&r.key, &race);
        }
        Some(OfferTo {
            race,
            id,
            payload: r.payload,
        })
    }

    /// Releases waiting race `race`, if it is watching.
    fn start(&mut self, race: RaceId, lead: bool) -> Option<ReleaseTo> {
        let r = self.races.get_mut(&race)?;
        r.waiting = false;
        Some(ReleaseTo { race, lead })
    }
}
