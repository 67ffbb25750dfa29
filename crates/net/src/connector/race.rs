//! One race in progress ([`Race`]) and the future that drives it ([`Racing`]): its state,
//! its start, its timer, and the attempts it starts.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use fastfallback_plan::{ConnectPlan, FastFallbackExchangeFinder};
use fastfallback_proto::{
    Alpn, AttemptError, AttemptId, CancelReason, Instant, PooledId, RaceError, TransportKind,
};
use fastfallback_route::Lesson;
use tokio::sync::mpsc::UnboundedSender;

use crate::events::{CallEvent, ConnectionEvent};
use crate::link::{EarlyQuic, Lease, RaceLink, SpareEnd};
use crate::report::{QueryLog, RaceCell};
use crate::{NetworkState, Stream, Transport};

use super::clock::*;
use super::shared::*;
use super::steps::*;

/// One race in progress: the state machine, and the futures it asked for.
pub(super) struct Race {
    pub(super) inner: Arc<Inner>,
    /// The race's state machine, with the driver's notes (its queries as sent and answered;
    /// those in flight hold their answer's future). Taken when the race ends; still here in
    /// `drop` if the caller gave up.
    pub(super) state: RaceState,
    pub(super) network: NetworkState,
    /// Attempts in flight; the first is kept inline (most races never run two at once).
    pub(super) running: smallvec::SmallVec<[Running; 1]>,
    /// The attempt that finished, waiting for the race to declare it the winner. The race does
    /// so in the same turn (a finished attempt wins at once), so one slot is enough. Its ALPN
    /// is in the race's record of it.
    pub(super) finished: Option<(AttemptId, Stream)>,
    /// The pool's side, for races run for it (boxed: most races have none).
    pub(super) pool: Option<Box<PoolSide>>,
}

/// Where a race's state machine is.
pub(super) enum RaceState {
    /// Running, and stepped by the driver. Boxed with the driver's notes (one allocation):
    /// the state machine is large, and the race future is moved around by value.
    Built(Box<RaceCell>),
    /// Ended: the result took it.
    Ended,
}

impl RaceState {
    /// The state machine, until the race ends.
    pub(super) fn built(&self) -> Option<&FastFallbackExchangeFinder> {
        match self {
            Self::Built(cell) => Some(&cell.race),
            Self::Ended => None,
        }
    }
}

/// What a race run for the pool holds besides the race.
pub(super) struct PoolSide {
    pub(super) link: RaceLink,
    /// Attempts cancelled but kept (overtaken by a pooled connection, or any loser with
    /// `SpareWinners::Pool`), with their plans (they outlive the race that holds them) and
    /// why they were cancelled.
    pub(super) spares: Vec<(Running, ConnectPlan, CancelReason)>,
    /// The pooled connection the race took, once it took one.
    pub(super) pooled: Option<Box<dyn Lease>>,
    /// A copy of what the race taught route memory, for the calls that waited on it.
    pub(super) lessons: Vec<Lesson>,
}

/// How the race ended, as far as the driver loop is concerned.
pub(super) enum Ending {
    Won(AttemptId),
    Pooled(PooledId),
    /// Boxed as the race gave it: an ending is returned through every turn.
    Failed(Box<RaceError>),
}

impl Drop for Race {
    /// The caller dropped the connect future: every attempt's future goes with the race, and
    /// what the race learned until now still reaches route memory.
    ///
    /// A race that ended has nothing left to do here: for it, this is one check, inlined.
    #[inline]
    fn drop(&mut self) {
        if let RaceState::Built(cell) = &mut self.state {
            abandon(&self.inner, self.network.id, &mut cell.race);
        }
    }
}

/// Abandons a race still running (see [`Race`]'s `Drop`): its lessons still reach route
/// memory.
fn abandon(
    inner: &Inner,
    network: fastfallback_route::NetworkId,
    finder: &mut FastFallbackExchangeFinder,
) {
    finder.abandon(now());
    inner.learn(network, finder, None);
}

impl Race {
    /// The listeners of a race run for the pool, if anyone listens.
    pub(super) fn listeners(&self) -> Option<&crate::events::Listeners> {
        self.pool
            .as_ref()
            .map(|p| &p.link.listeners)
            .filter(|l| !l.is_empty())
    }

    /// The plan of attempt `id`: the race's record of it (the driver keeps no copy).
    pub(super) fn plan_of(&self, id: AttemptId) -> Option<&ConnectPlan> {
        self.built()?.attempt(id).map(|a| &a.plan)
    }

    /// Where attempt `id` goes.
    pub(super) fn route_of(&self, id: AttemptId) -> Option<SocketAddr> {
        self.plan_of(id).map(|p| p.route.target)
    }

    /// Tells the listeners that attempt `id` to `route` failed (or was cancelled).
    pub(super) fn attempt_failed(
        &self,
        id: AttemptId,
        route: SocketAddr,
        error: &dyn fmt::Display,
    ) {
        if let Some(l) = self.listeners() {
            let error = error.to_string();
            l.call(|| CallEvent::ConnectFailed {
                attempt: id.get(),
                route,
                error: error.clone(),
            });
            l.connection(|| ConnectionEvent::ConnectFailed {
                attempt: id.get(),
                route,
                error,
            });
        }
    }

    /// Tells the listeners that attempt `id` connected to `route`. Without listeners (most
    /// races), this is one check where it is called.
    #[inline]
    pub(super) fn attempt_connected(&self, id: AttemptId, route: SocketAddr) {
        if let Some(l) = self.listeners() {
            connected(l, id, route);
        }
    }

    /// The race's state machine, until the race ends.
    pub(super) fn finder(&mut self) -> &mut FastFallbackExchangeFinder {
        &mut self.cell().race
    }

    /// The race's allocation: its state machine and the driver's notes.
    pub(super) fn cell(&mut self) -> &mut RaceCell {
        match &mut self.state {
            RaceState::Built(cell) => cell,
            // The state is taken only by `end`, after which the race is never polled again.
            _ => unreachable!("the race has not ended"),
        }
    }

    /// The race's queries as sent and answered (empty once the race ended).
    pub(super) fn log(&mut self) -> &mut [QueryLog] {
        match &mut self.state {
            RaceState::Built(cell) => &mut cell.driver.queries,
            RaceState::Ended => &mut [],
        }
    }

    /// The race's state machine, if it is built.
    pub(super) fn built(&self) -> Option<&FastFallbackExchangeFinder> {
        self.state.built()
    }

    /// The race's earliest timer ([`FastFallbackExchangeFinder::poll_timeout`]).
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.built()
            .and_then(FastFallbackExchangeFinder::poll_timeout)
    }

    /// Gives the attempts kept after losing to the pool, each as a future that finishes its
    /// connect (bounded by the attempt timeout).
    pub(super) fn hand_over_spares(&mut self) {
        let Some(pool) = &mut self.pool else {
            return;
        };
        let Some(watch) = pool.link.watch.clone() else {
            return;
        };
        // Before the race ends: a spare's steps after TCP need its origin. A race that has
        // ended already (never, as the race future calls this) drops its spares, which
        // closes them.
        let Some(origin) = self.state.built().map(FastFallbackExchangeFinder::address) else {
            return;
        };
        for (spare, plan, reason) in pool.spares.drain(..) {
            let limit = self.inner.policy.attempt_timeout;
            let (attempt, route) = (spare.id, plan.route.target);
            let mut after = AfterTcp::new(&self.inner, origin, &plan);
            let mut step = spare.step;
            if let Step::Tcp(f) = &mut step {
                f.start(&self.inner.socket);
            }
            let done = async move {
                match step {
                    Step::Tcp(f) => after.run(f.await.ok()?).await.ok(),
                    Step::Held(transport) => after.run(*transport?).await.ok(),
                    Step::Tunnel(f) => {
                        let transport = f.await.ok()?;
                        after.tunnel = None;
                        after.run(transport).await.ok()
                    }
                    Step::Tls(f) => f.await.ok(),
                }
            };
            watch.adopt(Box::pin(async move {
                SpareEnd {
                    attempt,
                    route,
                    reason,
                    connected: tokio::time::timeout(limit, done).await.ok().flatten(),
                }
            }));
        }
    }

    /// Starts what follows TCP for running attempt `i`: the tunnel of its plan (a step of its
    /// own, so the race knows when the attempt is in it), or else its TLS.
    pub(super) fn start_after_tcp(&mut self, i: usize, transport: Transport) {
        self.start_after(i, transport, true);
    }

    /// Starts TLS for running attempt `i`, whose tunnel is open.
    pub(super) fn start_tls(&mut self, i: usize, transport: Transport) {
        self.start_after(i, transport, false);
    }

    pub(super) fn start_after(&mut self, i: usize, transport: Transport, tunnel: bool) {
        let id = self.running[i].id;
        let Some(finder) = self.built() else {
            return;
        };
        let Some(record) = finder.attempt(id) else {
            return;
        };
        let mut after = AfterTcp::new(&self.inner, finder.address(), &record.plan);
        match after.tunnel.take() {
            Some(t) if tunnel => {
                self.running[i].step = Step::Tunnel(Box::pin(t.open(transport)));
                return;
            }
            _ => {}
        }
        if after.tls.is_some()
            && let Some(l) = self.listeners()
        {
            l.call(|| CallEvent::SecureConnectStart { attempt: id.get() });
        }
        self.running[i].step = Step::Tls(Box::pin(after.run(transport)));
    }

    /// Starts attempt `id` on the plan the race's record of it holds: its step, its span, and
    /// the listeners' event.
    pub(super) fn start_attempt(&mut self, id: AttemptId) {
        let Some(plan) = self.plan_of(id) else {
            debug_assert!(
                false,
                "the race started attempt {id} without a record of it"
            );
            return;
        };
        let early = self.pool.as_ref().and_then(|p| p.link.early.as_ref());
        let running = Self::running(&self.inner, self.listeners(), early, id, plan);
        self.running.push(running);
    }

    /// Attempt `id` on `plan`, started: its step (the socket opens when it is first
    /// polled), its span, and the listeners' event.
    #[inline]
    pub(super) fn running(
        inner: &Inner,
        listeners: Option<&crate::events::Listeners>,
        early: Option<&UnboundedSender<EarlyQuic>>,
        id: AttemptId,
        plan: &ConnectPlan,
    ) -> Running {
        tracing::debug!(%id, %plan, "attempt starts");
        let target = plan.route.target;
        if let Some(l) = listeners {
            l.call(|| CallEvent::ConnectStart {
                attempt: id.get(),
                route: target,
            });
            l.connection(|| ConnectionEvent::ConnectStart {
                attempt: id.get(),
                route: target,
            });
        }
        let step = match (&inner.dialer, plan.transport) {
            // One step: the QUIC handshake, TLS inside it (HEv3 §6.1).
            (_, TransportKind::Quic) => Step::Tls(quic_step(inner, plan, id, early)),
            (None, TransportKind::Tcp) => Step::Tcp(TcpStep::Unstarted(target)),
            (Some(dialer), TransportKind::Tcp) => {
                Step::Tcp(TcpStep::Dialed(dialer.dial(target, &inner.socket)))
            }
        };
        // When no subscriber listens at the debug level, no span is built at all (one check
        // of the level, before anything is gathered for it).
        let span = if tracing::level_enabled!(tracing::Level::DEBUG) {
            attempt_span(id, &plan.route.target)
        } else {
            None
        };
        Running { id, step, span }
    }
}

/// Tells listeners `l` that attempt `id` connected to `route`.
fn connected(l: &crate::events::Listeners, id: AttemptId, route: SocketAddr) {
    l.call(|| CallEvent::ConnectEnd {
        attempt: id.get(),
        route,
    });
    l.connection(|| ConnectionEvent::ConnectEnd {
        attempt: id.get(),
        route,
    });
}

/// The tracing span of attempt `id` to `target`, kept only when a subscriber wants it.
#[cold]
fn attempt_span(id: AttemptId, target: &SocketAddr) -> Option<Box<tracing::Span>> {
    let span = tracing::debug_span!(
        "attempt",
        id = id.get(),
        route = %target,
        family = if target.is_ipv6() { "IPv6" } else { "IPv4" },
    );
    (!span.is_disabled()).then(|| Box::new(span))
}

/// The step of a QUIC attempt `id` on `plan`: its handshake, when this build and connector
/// run QUIC (a connector refuses a QUIC policy otherwise, so this failure is a broken
/// invariant). With `early`, it hands its connection there if it can send 0-RTT.
fn quic_step(
    inner: &Inner,
    plan: &ConnectPlan,
    id: AttemptId,
    early: Option<&UnboundedSender<EarlyQuic>>,
) -> StepFuture<(Stream, Option<Alpn>)> {
    #[cfg(feature = "quic")]
    if let (Some(config), Some(tls)) = (&inner.quic, &plan.tls) {
        let handshake = crate::quic::handshake(
            config.clone(),
            plan.route.target,
            tls.server_name.clone(),
            early.map(|sink| (id, sink.clone())),
        );
        return Box::pin(handshake);
    }
    let _ = (inner, plan, id, early);
    Box::pin(std::future::ready(Err(AttemptError::new(
        fastfallback_proto::AttemptErrorKind::Io,
        fastfallback_proto::Phase::Tcp,
        "internal error: a QUIC attempt on a connector without QUIC",
    ))))
}
