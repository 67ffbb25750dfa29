//! Races run for the pool: registering a call on the [`RaceBoard`](fastfallback_pool::RaceBoard)
//! (single flight, watching), running the race linked to the pool, pooling what it won, and
//! carrying out the board's coalescing proposals once the certificate is checked.

use std::net::IpAddr;
use std::sync::{Arc, Weak};

use fastfallback_pool::{self as pool, Coalesce, RaceId};
use fastfallback_proto::{Alpn, CancelReason, PooledId, Protocol};
use fastfallback_route::Lesson;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::sync::mpsc;

use super::conn::{Conn, Proto};
use super::exchange::{Held, Lease, Parts};
use super::{Call, Exchange, ExchangeError, Locked, Origin, Shared, State, Trash, Watcher};
#[cfg(not(feature = "http3"))]
use fastfallback_net::ConnectError;
use fastfallback_net::link::{Listeners, Offer, RaceLink, Raced, Spare, Watch, now};
use fastfallback_net::{ConnectionEvent, Source};

/// A call's registration to run a race.
pub(super) struct Registration {
    /// Its place on the board; `None` for an exclusive call, which watches nothing.
    race: Option<RaceId>,
    offers: Option<mpsc::UnboundedReceiver<Offer>>,
    waiting: bool,
}

impl Shared {
    /// Registers a call that must race: single flight (lead or follow) and watching for
    /// connections that enter the pool.
    pub(super) fn register(
        &self,
        st: &mut Locked<'_>,
        origin: &Origin,
        exclusive: bool,
    ) -> Registration {
        if exclusive {
            return Registration {
                race: None,
                offers: None,
                waiting: false,
            };
        }
        let key = &origin.inner.key;
        let single_flight =
            self.options.single_flight && st.protocols.get(key) != Some(Protocol::Http11);
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = Watcher {
            origin: origin.clone(),
            offers: tx,
        };
        let watching = st.board.watch(key.clone(), single_flight, watcher);
        Registration {
            race: Some(watching.race),
            offers: Some(rx),
            waiting: watching.waits(),
        }
    }

    /// Runs the race for a registered call, and pools what it won.
    pub(super) async fn connect(
        self: &Arc<Self>,
        origin: &Origin,
        reg: Registration,
        call: &Call,
    ) -> Result<Exchange, ExchangeError> {
        let exclusive = call.exclusive;
        let mut guard = RaceGuard {
            shared: Arc::clone(self),
            race: reg.race,
            origin: origin.clone(),
            done: false,
        };
        let (tx, rx) = match reg.offers {
            Some(rx) => (None, rx),
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), rx)
            }
        };
        #[cfg_attr(
            not(feature = "http3"),
            expect(unused_mut, reason = "set for 0-RTT only")
        )]
        let mut link = RaceLink {
            waiting: reg.waiting,
            listeners: call.listeners(self),
            offers: rx,
            watch: reg.race.map(|race| {
                Arc::new(WatchHandle {
                    shared: Arc::downgrade(self),
                    race,
                    origin: origin.clone(),
                }) as Arc<dyn Watch>
            }),
            early: None,
        };
        #[cfg(feature = "http3")]
        let heard = call.early.as_ref().map(|_| {
            let (sink, heard) = mpsc::unbounded_channel();
            link.early = Some(sink);
            heard
        });
        let race = self
            .connector
            .race_linked(origin.inner.address.clone(), link);
        #[cfg(feature = "http3")]
        let (end, early) = match (heard, &call.early) {
            (Some(heard), Some(request)) => {
                let (end, early) = super::early::ride(race, heard, request, origin).await;
                let early = early.and_then(|e| e.kept(&end));
                (end, early)
            }
            _ => (race.await, None),
        };
        #[cfg(not(feature = "http3"))]
        let end = race.await;
        drop(tx);
        match end.result {
            Err(e) => {
                guard.finish(Landing::Failed(&end.lessons));
                Err(ExchangeError::Connect(e))
            }
            Ok(Raced::Pooled { lease, story }) => {
                guard.finish(Landing::Connected(&end.lessons));
                let checkout = {
                    let mut st = self.lock();
                    let coalesced = st
                        .pool
                        .key(lease.id())
                        .is_some_and(|k| *k != origin.inner.key);
                    let source = if coalesced {
                        Source::Coalesced
                    } else {
                        Source::PooledMidRace
                    };
                    // Just offered: no health ping.
                    Lease::handed_back(lease)
                        .and_then(|lease| self.take_parts(&mut st, lease))
                        .map(|c| (c, source))
                };
                let (c, source) = checkout.ok_or(ExchangeError::Closed)?;
                Exchange::pooled(c.lease, c.parts, source, Some(story), call.listener.clone())
            }
            Ok(Raced::Connected(conn)) => {
                let (stream, story) = conn.into_story();
                let protocol = match self.protocol_for(story.alpn(), origin) {
                    Ok(p) => p,
                    Err(e) => {
                        guard.finish(Landing::Failed(&end.lessons));
                        return Err(e);
                    }
                };
                let peer = story.peer();
                let streams = self.learned_streams(origin);
                let weak = Arc::downgrade(self);
                #[cfg(feature = "http3")]
                let (made, recv) = match early {
                    Some(e) => {
                        let conn = Conn::adopt_h3(stream, peer, e.driver, e.send, weak);
                        (conn, e.recv)
                    }
                    None => (
                        Conn::handshake(stream, peer, protocol, streams, weak).await,
                        None,
                    ),
                };
                #[cfg(not(feature = "http3"))]
                let made = Conn::handshake(stream, peer, protocol, streams, weak).await;
                let conn = match made {
                    Ok(c) => c,
                    Err(e) => {
                        guard.finish(Landing::Failed(&end.lessons));
                        return Err(e);
                    }
                };
                if exclusive {
                    guard.finish(Landing::Connected(&end.lessons));
                    return Ok(Exchange::exclusive(
                        conn,
                        origin.clone(),
                        story,
                        call.listener.clone(),
                    ));
                }
                let (lease, parts) = self.put(origin, conn, &mut guard, &end.lessons);
                let id = lease.id();
                let ex = Exchange::pooled(
                    lease,
                    parts,
                    Source::New,
                    Some(story),
                    call.listener.clone(),
                );
                self.offer_coalescing(id);
                #[cfg(feature = "http3")]
                if let Some(rx) = recv {
                    return ex.map(|ex| ex.sent_early(rx));
                }
                ex
            }
        }
    }

    /// Pools a new connection with one exchange counted for the caller, offers its spare
    /// capacity to the races watching for its key, and lands the caller's flight.
    pub(super) fn put(
        self: &Arc<Self>,
        origin: &Origin,
        mut conn: Conn,
        guard: &mut RaceGuard,
        lessons: &[Lesson],
    ) -> (Lease, Parts) {
        let parts = Parts {
            protocol: conn.protocol(),
            peer: conn.peer,
        };
        let held = match &mut conn.proto {
            Proto::Http1(s) => s.take().map_or(Held::Nothing, Held::Http1),
            Proto::Http2 { send, .. } => Held::Http2(send.clone()),
            #[cfg(feature = "http3")]
            Proto::Http3(send) => Held::Http3(send.clone()),
        };
        let mut st = self.lock();
        guard.done = true;
        guard.unwatch(&mut st);
        let id = self.insert(&mut st, origin, conn, true);
        guard.land(&mut st, Landing::Connected(lessons));
        drop(st);
        let mut lease = Lease::new(origin.clone(), id);
        lease.hold(held);
        (lease, parts)
    }

    /// Inserts a connection for `origin`, with one exchange counted for the caller when
    /// `taken` (idle otherwise), and offers what is free to the races watching.
    pub(super) fn insert(
        self: &Arc<Self>,
        st: &mut Locked<'_>,
        origin: &Origin,
        conn: Conn,
        taken: bool,
    ) -> PooledId {
        let t = now();
        st.clock = st.clock.max(t);
        let protocol = conn.protocol();
        let peer = conn.peer;
        let health = Arc::clone(&conn.health);
        let max = health
            .max_streams()
            .or_else(|| st.protocols.max_streams(&origin.inner.key))
            .unwrap_or(0);
        let id = st
            .pool
            .insert(origin.inner.key.clone(), conn, protocol, max, t);
        health.set_id(id);
        st.pool.set_peer(id, peer);
        if taken {
            st.pool.acquire_id(id);
        }
        st.protocols.remember(&origin.inner.key, protocol);
        self.offer_capacity(st, id);
        if !st.monitor_running {
            st.monitor_running = self.start_monitor();
        }
        self.monitor.notify_one();
        id
    }

    /// Opens one connection to `origin` and pools it idle (for [`Pool::keep_warm`]).
    pub(super) async fn open_idle(self: &Arc<Self>, origin: &Origin) -> Result<(), ExchangeError> {
        let (_tx, rx) = mpsc::unbounded_channel();
        let link = RaceLink {
            waiting: false,
            listeners: Listeners {
                call: None,
                connection: self.listener.clone(),
            },
            offers: rx,
            watch: None,
            early: None,
        };
        let end = self
            .connector
            .race_linked(origin.inner.address.clone(), link)
            .await;
        let conn = match end.result.map_err(ExchangeError::Connect)? {
            Raced::Connected(conn) => conn,
            // Only offered to races that watch, which this one does not.
            Raced::Pooled { .. } => return Ok(()),
        };
        let (stream, story) = conn.into_story();
        let protocol = self.protocol_for(story.alpn(), origin)?;
        let streams = self.learned_streams(origin);
        let weak = Arc::downgrade(self);
        let conn = Conn::handshake(stream, story.peer(), protocol, streams, weak).await?;
        let mut st = self.lock();
        let id = self.insert(&mut st, origin, conn, false);
        drop(st);
        self.offer_coalescing(id);
        Ok(())
    }

    /// The protocol a new connection speaks: ALPN's choice, or prior-knowledge h2 on
    /// cleartext when the options say so (RFC 9113 §3.3). A QUIC connection (ALPN `h3`) is
    /// refused with a reason: the pool does not speak HTTP/3 yet, and reading HTTP/1.1 from
    /// a connection of many streams could only fail later and less clearly.
    pub(super) fn protocol_for(
        &self,
        alpn: Option<&Alpn>,
        origin: &Origin,
    ) -> Result<Protocol, ExchangeError> {
        Ok(match (alpn, origin.is_tls()) {
            #[cfg(feature = "http3")]
            (Some(Alpn::H3), _) => Protocol::Http3,
            #[cfg(not(feature = "http3"))]
            (Some(Alpn::H3), _) => {
                return Err(ExchangeError::Connect(ConnectError::Unsupported(
                    "a QUIC connection won the race, and this build of the pool does not \
                     speak HTTP/3: build fastfallback-http with its `http3` feature, or give \
                     the pool a connector without FallbackPolicy::quic",
                )));
            }
            (Some(Alpn::H2), true) => Protocol::Http2,
            (_, false) if self.options.prior_knowledge_h2 => Protocol::Http2,
            _ => Protocol::Http11,
        })
    }

    /// The HTTP/2 stream limit `origin`'s server set on an earlier connection: a new one
    /// opens no more streams than that before its SETTINGS arrive (RFC 9113 §5.1.2).
    pub(super) fn learned_streams(&self, origin: &Origin) -> Option<u32> {
        let st = self.lock();
        st.protocols
            .max_streams(&origin.inner.key)
            .filter(|&n| n > 0)
    }

    /// Offers HTTP/2 connection `id` to the races of other hosts it may be coalesced for.
    /// Certificates are checked outside the lock, then each offer is made under it.
    pub(super) fn offer_coalescing(self: &Arc<Self>, id: PooledId) {
        let (proposals, certs) = {
            let st = self.lock();
            if st.board.is_empty() {
                return;
            }
            let certs = st.pool.get(id).and_then(|c| c.certs.clone());
            (st.board.coalescable(&st.pool, id), certs)
        };
        for p in proposals {
            if self.covers(certs.as_deref(), &p.host) {
                self.offer_checked(&p);
            }
        }
    }

    /// A race learned addresses of its host: the board stores them, and a pooled HTTP/2
    /// connection it may be coalesced onto is offered (§3.7: peer IP among the resolved
    /// addresses, same port, no proxy, accepting exchanges, and here the certificate covering
    /// the host).
    fn resolved(self: &Arc<Self>, race: RaceId, addresses: &[IpAddr]) {
        let proposals = {
            let mut st = self.lock();
            let state: &mut State = &mut st;
            state.board.resolved(&state.pool, race, addresses)
        };
        for p in proposals {
            let certs = self.lock().pool.get(p.id).and_then(|c| c.certs.clone());
            if self.covers(certs.as_deref(), &p.host) && self.offer_checked(&p) {
                return;
            }
        }
    }

    /// Whether the certificate chain `certs` (leaf first) covers `host`, asked of the
    /// connector's own verifier (the chain and the name, as a handshake for `host` would
    /// check them; RFC 9113 §9.1.1).
    fn covers(&self, certs: Option<&[CertificateDer<'static>]>, host: &str) -> bool {
        let Some(verifier) = self.connector.certificate_verifier() else {
            return false;
        };
        let (Some(certs), Ok(name)) = (certs, ServerName::try_from(host.to_owned())) else {
            return false;
        };
        let Some((leaf, intermediates)) = certs.split_first() else {
            return false;
        };
        verifier
            .verify_server_cert(leaf, intermediates, &name, &[], UnixTime::now())
            .is_ok()
    }

    /// Makes the offer `p` proposed, its certificate checked: one exchange, if the race still
    /// watches and the connection has room. Returns whether it was made.
    fn offer_checked(self: &Arc<Self>, p: &Coalesce) -> bool {
        let mut st = self.lock();
        let state: &mut State = &mut st;
        match state.board.offer(&mut state.pool, p.race, p.id) {
            Some(offer) => {
                self.send_offer(&mut st, offer);
                true
            }
            None => false,
        }
    }
}

/// How a race run for the pool ended, for the flight it may lead.
#[derive(Clone, Copy)]
enum Landing<'a> {
    /// It has a connection (new or offered), or it ran for an exclusive call.
    Connected(&'a [Lesson]),
    /// It failed: its followers race on their own, with what it taught route memory.
    Failed(&'a [Lesson]),
    /// Its call was dropped before the race ended.
    Dropped,
}

/// Unregisters a call's race from the pool when it ends or is dropped, and lands the flight
/// it leads, if it does (a follower can be handed the lead when its leader is dropped).
pub(super) struct RaceGuard {
    shared: Arc<Shared>,
    /// Its place on the board; `None` for an exclusive call (never watching).
    race: Option<RaceId>,
    /// The origin the race connects to.
    origin: Origin,
    /// Landed already.
    done: bool,
}

impl RaceGuard {
    fn unwatch(&self, st: &mut Locked<'_>) {
        if let Some(race) = self.race
            && let Some(w) = st.board.unwatch(race)
        {
            st.trash.push(Trash::Watcher(w));
        }
    }

    /// Ends the flight this call leads, if it leads one, and releases the followers the
    /// board names ([`fastfallback_pool::RaceBoard::land`]): with `lessons` when the flight
    /// landed without a connection to share, with none to one that takes the connect over.
    fn land(&self, st: &mut Locked<'_>, landing: Landing<'_>) {
        let Some(race) = self.race else {
            return;
        };
        let (landed, lessons) = match landing {
            Landing::Connected(lessons) => (pool::Landing::Connected, lessons),
            Landing::Failed(lessons) => (pool::Landing::Failed, lessons),
            Landing::Dropped => (pool::Landing::Dropped, &[][..]),
        };
        let state: &mut State = st;
        let releases = state
            .board
            .land(&state.pool, &self.origin.inner.key, race, landed);
        st.release_races(releases, lessons);
    }

    fn finish(&mut self, landing: Landing<'_>) {
        if self.done {
            return;
        }
        self.done = true;
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock();
        self.unwatch(&mut st);
        self.land(&mut st, landing);
    }
}

impl Drop for RaceGuard {
    fn drop(&mut self) {
        self.finish(Landing::Dropped);
    }
}

/// The race's window on the pool: it reports what it resolved, and hands over the attempts
/// it kept after losing.
struct WatchHandle {
    shared: Weak<Shared>,
    race: RaceId,
    origin: Origin,
}

impl Watch for WatchHandle {
    fn resolved(&self, addresses: &[IpAddr]) {
        if let Some(shared) = self.shared.upgrade() {
            shared.resolved(self.race, addresses);
        }
    }

    /// A kept attempt that connects is pooled idle if it speaks HTTP/2 (its streams can serve
    /// the next calls), or if a pooled connection overtook it ([`CancelReason::Overtaken`]):
    /// its call found every connection busy, so the pool is short of one. An HTTP/1 loser of
    /// a race among routes (`SpareWinners::Pool`) is closed: nothing asked for it.
    fn adopt(&self, spare: Spare) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let origin = self.origin.clone();
        tokio::spawn(async move {
            let end = spare.await;
            let shared = Arc::clone(&origin.inner.shared);
            let (attempt, route, reason) = (end.attempt.get(), end.route, end.reason);
            let Some((stream, alpn)) = end.connected else {
                if let Some(l) = &shared.listener {
                    l.event(&ConnectionEvent::ConnectFailed {
                        attempt,
                        route,
                        error: format!("kept after it was cancelled ({reason}); did not connect"),
                    });
                }
                return;
            };
            if let Some(l) = &shared.listener {
                l.event(&ConnectionEvent::ConnectEnd { attempt, route });
            }
            let peer = route;
            // A kept QUIC connection is closed too (the pool speaks no HTTP/3 yet).
            let Ok(protocol) = shared.protocol_for(alpn.as_ref(), &origin) else {
                return;
            };
            if !protocol.is_multiplexed() && reason != CancelReason::Overtaken {
                // Not worth keeping: dropping it closes it.
                return;
            }
            let weak = Arc::downgrade(&shared);
            let streams = shared.learned_streams(&origin);
            let Ok(conn) = Conn::handshake(stream, peer, protocol, streams, weak).await else {
                return;
            };
            let mut st = shared.lock();
            let id = shared.insert(&mut st, &origin, conn, false);
            drop(st);
            shared.offer_coalescing(id);
        });
    }
}
