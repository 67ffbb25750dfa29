//! The race as a future ([`Racing`]): built by [`Race::start`], it runs the driver loop, one
//! turn per wake-up, and registers the race's timer with tokio only when it has to.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use fastfallback_plan::{FastFallbackExchangeFinder, RaceInput};
use fastfallback_proto::Instant;
use fastfallback_route::{Address, Host, Lesson};
use tokio::time::Sleep;

use crate::NetworkState;
use crate::link::{RaceLink, Raced};
use crate::report::Notes;

use super::clock::*;
use super::error::ConnectError;
use super::race::*;
use super::shared::*;

/// A race as a future ([`Race::start`] builds it): the driver loop, a turn per wake-up. A
/// plain struct rather than an `async fn`, so a connect future holds the race once and moves
/// nothing per poll.
pub(super) struct Racing {
    pub(super) race: Race,
    /// The race's earliest timer in tokio's timer wheel, once registered there (see
    /// [`Racing::poll_timer`]). Boxed: most races never register one, and a race future is
    /// moved before it runs.
    pub(super) sleep: Option<Pin<Box<Sleep>>>,
    /// The instant of the current turn. One clock reading per wake-up: the event that woke
    /// the race and everything the race decides because of it happen at the same instant.
    pub(super) t: Moment,
    /// The race's earliest timer ([`FastFallbackExchangeFinder::poll_timeout`]).
    pub(super) armed_at: Option<Instant>,
    /// Whether the race has waited once without registering its timer.
    pub(super) yielded: bool,
    /// Whether a wake-up (or the start) left something to decide before the next wait.
    pub(super) turn_due: bool,
}

impl Racing {
    /// Runs the race where it was built: awaiting the race itself would move the future (344
    /// bytes) once more.
    pub(super) fn run(&mut self) -> impl Future<Output = <Self as Future>::Output> + '_ {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll(cx))
    }

    /// What the race taught route memory, for the pool's calls that waited on it (a race
    /// outside the pool keeps no copy). Read once the race has ended.
    pub(super) fn lessons(&mut self) -> Vec<Lesson> {
        let pool = self.race.pool.as_mut();
        pool.map(|p| std::mem::take(&mut p.lessons))
            .unwrap_or_default()
    }

    /// Waits for the race's earliest timer, if it has one.
    ///
    /// Registering a timer with tokio (and taking it out again) costs more than the rest of a
    /// connect that finishes within one turn of the I/O driver, as most loopback and LAN
    /// connects do. So the first time the race waits, it does not register its timer: it asks
    /// to be polled again right after the driver's next turn (`yield_now`'s deferred wake).
    /// Only a race still waiting then registers it. Timers are absolute instants, so one that
    /// is registered a turn later still fires on time.
    pub(super) fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.armed_at.is_none() {
            return Poll::Pending;
        }
        if self.sleep.is_none() && !self.yielded {
            self.yielded = true;
            // A fresh `yield_now` future hands the waker to the scheduler on its first poll.
            let _ = std::pin::pin!(tokio::task::yield_now()).poll(cx);
            return Poll::Pending;
        }
        let Some(at) = self.armed_at else {
            return Poll::Pending;
        };
        let at = tokio_instant(at);
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                // Re-registered only when the race's earliest timer moved.
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
                sleep
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        sleep.as_mut().poll(cx)
    }
}

impl Future for Racing {
    type Output = Result<Raced, ConnectError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Nothing in a race is pinned: its futures are boxed or `Unpin`.
        let this = self.get_mut();
        // `Race::end` takes the race's state.
        if matches!(this.race.state, RaceState::Ended) {
            return Poll::Ready(Err(ConnectError::Internal("a race polled after it ended")));
        }
        loop {
            if this.turn_due {
                this.turn_due = false;
                let (race, t) = (&mut this.race, &mut this.t);
                if let Some(ending) = race.turn(t) {
                    // Before the end takes the race: a spare still in its TCP step reads the
                    // origin from it for the TLS step it goes on to.
                    if race.pool.is_some() {
                        race.hand_over_spares();
                    }
                    return Poll::Ready(race.end(ending));
                }
                // Re-registered with tokio's timer wheel only when it moves (`poll_timer`).
                this.armed_at = race.poll_timeout();
            }
            if !this.race.poll_event(cx, &mut this.t) {
                std::task::ready!(this.poll_timer(cx));
                // The timer fired: the turn fires what is due.
                this.t = Moment::now();
            }
            this.turn_due = true;
        }
    }
}

impl Race {
    /// Starts a race at `t0` on `network`: the race, built in the future that runs it.
    #[inline]
    pub(super) fn start(
        inner: Arc<Inner>,
        address: Address,
        link: Option<RaceLink>,
        (network, reading): (NetworkState, tokio::time::Instant),
    ) -> Racing {
        let mut t0 = Moment::of(reading);
        let (host, port) = address.connect_host();
        // A literal's view needs no clock reading of its own.
        let memory = match (&inner.db, host) {
            (Some(db), Host::Ip(ip)) => db.literal_view(SocketAddr::new(*ip, port)),
            (Some(db), Host::Name(_)) => db.view(network.id, &address, t0.at()),
            (None, _) => fastfallback_route::MemoryView::disabled(),
        };
        // Alt-Svc's HTTP/3 alternatives (RFC 7838): asked only by a connector that races
        // QUIC, so that no other connect pays for the look-up.
        let alternatives = match (&inner.db, host) {
            (Some(db), Host::Name(_)) if inner.policy.quic => {
                db.alternatives(network.id, &address, t0.at())
            }
            _ => Vec::new(),
        };
        let (seed, at) = (inner.next_seed(), t0.at());
        let waiting = link.as_ref().is_some_and(|l| l.waiting);
        // The input is written where the call takes it: built beforehand, it would be copied
        // there (152 bytes, a `memcpy` call).
        let state = RaceState::Built(FastFallbackExchangeFinder::boxed_with(
            address,
            Arc::clone(&inner.policy),
            RaceInput {
                connectivity: network.connectivity,
                memory,
                seed,
                waiting,
                alternatives,
            },
            at,
            Notes::default(),
        ));
        // Built in its future: the race is not moved again once it runs.
        Racing {
            race: Self {
                inner,
                state,
                network,
                running: smallvec::SmallVec::new(),
                finished: None,
                pool: link.map(|link| {
                    Box::new(PoolSide {
                        link,
                        spares: Vec::new(),
                        pooled: None,
                        lessons: Vec::new(),
                    })
                }),
            },
            sleep: None,
            t: t0,
            armed_at: None,
            yielded: false,
            turn_due: true,
        }
    }
}
