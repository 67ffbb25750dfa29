//! Checking a pooled connection out for one exchange: under the lock, then the health checks
//! that need I/O (an HTTP/1 sender's readiness, an HTTP/2 PING) outside it.

use std::sync::Arc;

use fastfallback_net::Source;

use super::conn::{Conn, Proto};
use super::exchange::{Held, Lease, Parts};
use super::{Call, Exchange, Locked, Origin, Shared, Trash};
use fastfallback_net::link::{Offer, now};

/// Takes what one exchange on `conn` needs (the HTTP/1 sender, or a clone of the HTTP/2 one),
/// and the PING handle when the connection sat idle long enough to be checked (`stale`).
/// `None` if the connection is dead.
fn take_from(conn: &mut Conn, stale: bool) -> Option<(Held, Parts, Option<PingHandle>)> {
    if conn.health.is_closed() {
        return None;
    }
    let parts = Parts {
        protocol: conn.protocol(),
        peer: conn.peer,
    };
    match &mut conn.proto {
        Proto::Http1(slot) => {
            let sender = slot.take().filter(|s| !s.is_closed())?;
            Some((Held::Http1(sender), parts, None))
        }
        Proto::Http2 { send, ping } => Some((
            Held::Http2(send.clone()),
            parts,
            stale.then(|| Arc::clone(ping)),
        )),
        // QUIC keeps itself alive and says when it closes (the task's end): no ping.
        #[cfg(feature = "http3")]
        Proto::Http3(send) => Some((Held::Http3(send.clone()), parts, None)),
    }
}

/// An HTTP/2 connection's PING handle, behind its own lock.
type PingHandle = Arc<tokio::sync::Mutex<Option<h2::PingPong>>>;

/// A pooled connection checked out under the lock, still to be health-checked outside it.
pub(super) struct Checkout {
    pub(super) lease: Lease,
    pub(super) parts: Parts,
    /// An HTTP/2 connection to ping first, having sat unused this long.
    pub(super) ping: Option<PingHandle>,
}

impl Shared {
    /// The fast path: a pooled connection that needs no I/O to check (an HTTP/1 sender that is
    /// ready, an HTTP/2 connection used recently). `None` sends the call down the slow path.
    pub(super) fn checkout_ready(self: &Arc<Self>, origin: &Origin) -> Option<Exchange> {
        let mut st = self.lock();
        let c = self.checkout(&mut st, origin)?;
        let mut c = c;
        let sync = c.ping.is_none() && c.lease.h1_mut().is_none_or(|h1| h1.is_ready());
        drop(st);
        if !sync {
            // Given back (after the lock), and taken again by the slow path.
            drop(c);
            return None;
        }
        Exchange::pooled(c.lease, c.parts, Source::Pool, None, None).ok()
    }

    /// Takes a usable pooled connection for `key`, if there is one; connections found dead
    /// on the way are closed.
    ///
    /// No clock is read for HTTP/1: the keep-alive check uses the pool's latest reading, and
    /// the idle monitor (always running while connections exist, since their tasks need a
    /// runtime) closes expired connections on time. An HTTP/2 connection that was idle reads
    /// the clock, to decide on a health ping.
    pub(super) fn checkout(&self, st: &mut Locked<'_>, origin: &Origin) -> Option<Checkout> {
        let key = &origin.inner.key;
        let ping_after = self.options.ping_after_idle;
        loop {
            let t = st.clock;
            let a = st.pool.acquire_entry(key, t)?;
            let id = a.id;
            let was_idle = a.allocations == 1 && a.idle_since.is_some();
            let since = a.idle_since;
            let multiplexed = matches!(a.conn.proto, Proto::Http2 { .. });
            // (HTTP/3 is multiplexed too, but needs no ping: `take_from`.)
            let stale =
                multiplexed && was_idle && since.is_some_and(|since| now() - since >= ping_after);
            match take_from(a.conn, stale) {
                Some((held, parts, ping)) => {
                    let mut lease = Lease::new(origin.clone(), id);
                    lease.hold(held);
                    return Some(Checkout { lease, parts, ping });
                }
                None => {
                    if let Some(c) = st.pool.remove(id) {
                        st.close(c);
                    }
                }
            }
        }
    }

    /// What an exchange under `lease` (already counted) needs; `None` if the connection turned
    /// out dead (it is then closed, and the lease dropped after the lock).
    pub(super) fn take_parts(&self, st: &mut Locked<'_>, mut lease: Lease) -> Option<Checkout> {
        let id = lease.id();
        match st.pool.get_mut(id).and_then(|conn| take_from(conn, false)) {
            Some((held, parts, ping)) => {
                lease.hold(held);
                Some(Checkout { lease, parts, ping })
            }
            None => {
                if let Some(c) = st.pool.remove(id) {
                    st.close(c);
                }
                st.trash.push(Trash::Offer(Offer::Pooled(lease.offered())));
                None
            }
        }
    }

    /// Health checks that need I/O, outside the lock: an HTTP/1 sender must be ready, an HTTP/2
    /// connection idle past the threshold must answer a PING. Returns the exchange, or `None`
    /// after closing a connection that failed.
    pub(super) async fn verify(
        self: &Arc<Self>,
        mut c: Checkout,
        source: Source,
        call: &Call,
    ) -> Option<Exchange> {
        if let Some(h1) = c.lease.h1_mut()
            && !h1.is_ready()
            && h1.ready().await.is_err()
        {
            self.no_new_exchanges(c.lease.id());
            c.lease.spoil();
            drop(c.lease);
            return None;
        }
        if let Some(ping) = c.ping.take() {
            let answered = tokio::time::timeout(self.options.ping_timeout, async {
                let mut pp = ping.lock().await;
                match pp.as_mut() {
                    Some(pp) => pp.ping(h2::Ping::opaque()).await.is_ok(),
                    None => false,
                }
            })
            .await
            .unwrap_or(false);
            if !answered {
                self.no_new_exchanges(c.lease.id());
                drop(c.lease);
                return None;
            }
        }
        Exchange::pooled(c.lease, c.parts, source, None, call.listener.clone()).ok()
    }
}
