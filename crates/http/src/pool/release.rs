//! Exchanges and connections ending, and the race board's decisions carried out: releasing
//! an exchange, retiring a connection, sending the offers and releases the
//! [`RaceBoard`](fastfallback_pool::RaceBoard) decides then.

use std::sync::Arc;

use fastfallback_net::ConnectionEvent;
use fastfallback_net::link::{Offer, now};
use fastfallback_pool::{OfferTo, ReleaseTo};
use fastfallback_proto::{PooledId, Protocol};
use fastfallback_route::Lesson;
use tokio::sync::mpsc;

use super::conn::{H1Sender, Health, Proto};
use super::exchange::Lease;
use super::{Locked, Origin, Shared, State, Trash, Watcher};

impl Locked<'_> {
    /// Tells released races to start connecting: with `lessons` those whose flight landed
    /// without a connection to share, with none the one that leads a connect now.
    pub(super) fn release_races(
        &self,
        releases: impl IntoIterator<Item = ReleaseTo>,
        lessons: &[Lesson],
    ) {
        for r in releases {
            if let Some(w) = self.board.get(r.race) {
                let lessons = if r.lead { Vec::new() } else { lessons.to_vec() };
                let _ = w.offers.send(Offer::Release(lessons));
            }
        }
    }
}

impl Shared {
    /// Offers free exchanges on `id` to the races watching for its key, one each (the board
    /// reserves them).
    pub(super) fn offer_capacity(self: &Arc<Self>, st: &mut Locked<'_>, id: PooledId) {
        let state: &mut State = st;
        let offers = state.board.offer_capacity(&mut state.pool, id);
        for offer in offers {
            self.send_offer(st, offer);
        }
    }

    /// Sends an exchange the board reserved to its race (which left the board). If the race
    /// is gone the reservation is undone at once, which offers it to the next race.
    pub(super) fn send_offer(self: &Arc<Self>, st: &mut Locked<'_>, offer: OfferTo<Watcher>) {
        let OfferTo { id, payload: w, .. } = offer;
        let multiplexed = st.pool.protocol(id).is_some_and(Protocol::is_multiplexed);
        let lease = Lease::new(w.origin.clone(), id).multiplexed(multiplexed);
        if let Err(mpsc::error::SendError(Offer::Pooled(lease))) =
            w.offers.send(Offer::Pooled(lease.offered()))
            && let Some(lease) = Lease::handed_back(lease)
        {
            let id = lease.into_id();
            self.release_locked(st, id, None, true, false);
        }
        st.trash.push(Trash::Watcher(w));
    }

    /// Ends one exchange on `id`. `h1` is the HTTP/1 sender the exchange held; `reusable`
    /// says whether the connection may carry another exchange; `announced` whether the
    /// listener heard it acquired (an offer a race refused was not).
    pub(super) fn release(
        self: &Arc<Self>,
        id: PooledId,
        h1: Option<H1Sender>,
        reusable: bool,
        announced: bool,
    ) {
        let mut st = self.lock();
        self.release_locked(&mut st, id, h1, reusable, announced);
    }

    fn release_locked(
        self: &Arc<Self>,
        st: &mut Locked<'_>,
        id: PooledId,
        h1: Option<H1Sender>,
        reusable: bool,
        announced: bool,
    ) {
        if !reusable {
            // An HTTP/2 connection finishes its other streams; HTTP/1 closes below.
            st.retire(id);
            self.rescue_waiters(st, id);
        }
        let t = now();
        st.clock = t;
        let released = st.pool.release_with(id, t, |conn| {
            let healthy = reusable && !conn.health.is_closed();
            match &mut conn.proto {
                Proto::Http1(slot) => match h1 {
                    Some(s) if healthy && !s.is_closed() => {
                        *slot = Some(s);
                        true
                    }
                    // The sender stayed in the pool (an offer that was not taken).
                    None => healthy && slot.is_some(),
                    Some(_) => false,
                },
                Proto::Http2 { .. } => true,
                #[cfg(feature = "http3")]
                Proto::Http3(_) => true,
            }
        });
        match released {
            fastfallback_pool::Release::Close(c) => {
                if announced {
                    st.event(|| ConnectionEvent::Released { connection: id.0 });
                }
                st.close(c);
            }
            fastfallback_pool::Release::Ignored => {}
            fastfallback_pool::Release::Released => {
                if announced {
                    st.event(|| ConnectionEvent::Released { connection: id.0 });
                }
                self.offer_capacity(st, id);
                // The monitor already sleeps no longer than the keep-alive of the oldest
                // idle connection (or the whole keep-alive when none was idle), so a
                // connection becoming idle needs no wake-up, unless the idle limit may now be
                // exceeded.
                if st.pool.len() > st.pool.config().max_idle && st.pool.allocations(id) == Some(0) {
                    self.monitor.notify_one();
                }
            }
        }
    }

    /// Connection `id` takes no new exchange (an error on it, a GOAWAY).
    pub(super) fn no_new_exchanges(&self, id: PooledId) {
        let mut st = self.lock();
        st.retire(id);
        self.rescue_waiters(&mut st, id);
    }

    /// After connection `id` stopped taking new exchanges: if calls wait for a stream on its
    /// key and nothing else can give them one, the first waiter leads a new connect and the
    /// others follow it ([`fastfallback_pool::RaceBoard::retired`]).
    fn rescue_waiters(&self, st: &mut Locked<'_>, id: PooledId) {
        let state: &mut State = st;
        let release = state.board.retired(&state.pool, id);
        st.release_races(release, &[]);
    }

    /// A 421 answered over coalesced connection `id`: never use it for that host again.
    pub(super) fn misdirected(&self, id: PooledId, origin: &Origin) {
        let mut st = self.lock();
        st.pool.forbid_coalescing(id, origin.inner.key.host());
    }

    /// A connection's task ended: it takes no new exchange and is closed once idle.
    pub(super) fn connection_ended(&self, health: &Health) {
        let mut st = self.lock();
        if let Some(id) = health.id() {
            st.retire(id);
            self.rescue_waiters(&mut st, id);
            if st.pool.allocations(id) == Some(0)
                && let Some(c) = st.pool.remove(id)
            {
                st.close(c);
            }
        }
    }

    /// An HTTP/2 peer's SETTINGS arrived: its stream limit replaces the provisional one.
    pub(super) fn settings_known(self: &Arc<Self>, health: &Health) {
        let mut st = self.lock();
        if let (Some(id), Some(max)) = (health.id(), health.max_streams()) {
            st.pool.set_max_streams(id, max);
            if let Some(key) = st.pool.key(id).cloned() {
                st.protocols.remember_max_streams(&key, max);
            }
            self.offer_capacity(&mut st, id);
        }
    }
}
