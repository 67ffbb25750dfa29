//! One race in progress ([`Race`]) and the future that drives it ([`Racing`]): its state,
//! its start, its timer, and the attempts it starts.

use super::*;

/// One race in progress: the state machine, and the futures it asked for.
pub(super) struct Race {
    pub(super) inner: Arc<Inner>,
    /// The race's state machine, or what builds it. Taken when the race ends; still here in
    /// `drop` if the caller gave up.
    pub(super) state: RaceState,
    pub(super) network: NetworkState,
    pub(super) log: Vec<QueryLog>,
    pub(super) queries: Vec<(Query, Answer)>,
    /// Attempts in flight; the first is kept inline (most races never run two at once).
    pub(super) running: smallvec::SmallVec<[Running; 1]>,
    /// The attempt that finished, waiting for the race to declare it the winner. The race does
    /// so in the same turn (a finished attempt wins at once), so one slot is enough.
    pub(super) finished: Option<(AttemptId, Stream, Option<Alpn>)>,
    /// The pool's side, for races run for it (boxed: most races have none).
    pub(super) pool: Option<Box<PoolSide>>,
}

/// Where a race's state machine is.
pub(super) enum RaceState {
    /// Running, and stepped by the driver. Boxed: the state machine is large, and the race
    /// future is moved around by value.
    Built(Box<FastFallbackExchangeFinder>),
    /// Ended: the result took it.
    Ended,
}

impl RaceState {
    /// The state machine, until the race ends.
    pub(super) fn built(&self) -> Option<&FastFallbackExchangeFinder> {
        match self {
            Self::Built(finder) => Some(finder),
            Self::Ended => None,
        }
    }
}

/// What a race run for the pool holds besides the race.
pub(super) struct PoolSide {
    pub(super) link: RaceLink,
    /// Attempts that lost but are kept (`SpareWinners::Pool`), with their plans (they outlive
    /// the race that holds them).
    pub(super) spares: Vec<(Running, ConnectPlan)>,
    /// The pooled connection the race took, once it took one.
    pub(super) pooled: Option<Box<dyn Lease>>,
    /// A copy of what the race taught route memory, for the calls that waited on it.
    pub(super) lessons: Vec<Lesson>,
}

/// How the race ended, as far as the driver loop is concerned.
pub(super) enum Ending {
    Won(AttemptId),
    Pooled(PooledId),
    Failed(RaceError),
}

impl Drop for Race {
    /// The caller dropped the connect future: every attempt's future goes with the race, and
    /// what the race learned until now still reaches route memory.
    fn drop(&mut self) {
        if let RaceState::Built(finder) = &mut self.state {
            finder.abandon(now());
            self.inner.learn(self.network.id, finder, None);
        }
    }
}

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
                    let result = race.end(ending, t);
                    race.hand_over_spares();
                    return Poll::Ready(result);
                }
                // Re-registered with tokio's timer wheel only when it moves (`poll_timer`).
                this.armed_at = race.poll_timeout();
            }
            let wake = match this.race.poll_wake(cx) {
                Poll::Ready(wake) => wake,
                Poll::Pending => {
                    std::task::ready!(this.poll_timer(cx));
                    Wake::Timer
                }
            };
            this.t = Moment::now();
            this.race.handle(wake, &mut this.t);
            this.turn_due = true;
        }
    }
}

impl Race {
    /// Starts a race at `t0` on `network`: the race, built in the future that runs it.
    pub(super) fn start(
        inner: Arc<Inner>,
        address: Address,
        link: Option<RaceLink>,
        (network, reading): (NetworkState, tokio::time::Instant),
    ) -> Racing {
        let mut t0 = Moment::of(reading);
        // A literal's view needs no clock reading of its own.
        let memory = match (&inner.db, address.connect_host()) {
            (Some(db), (Host::Ip(ip), port)) => db.literal_view(SocketAddr::new(*ip, port)),
            (Some(db), _) => db.view(network.id, &address, t0.at()),
            (None, _) => fastfallback_route::MemoryView::disabled(),
        };
        let input = RaceInput {
            connectivity: network.connectivity,
            memory,
            seed: inner.next_seed(),
            waiting: link.as_ref().is_some_and(|l| l.waiting),
        };
        let state = RaceState::Built(FastFallbackExchangeFinder::boxed(
            address,
            Arc::clone(&inner.policy),
            input,
            t0.at(),
        ));
        // Built in its future: the race is not moved again once it runs.
        Racing {
            race: Self {
                inner,
                state,
                network,
                log: Vec::new(),
                queries: Vec::new(),
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

    /// Tells the listeners that attempt `id` connected to `route`.
    pub(super) fn attempt_connected(&self, id: AttemptId, route: SocketAddr) {
        if let Some(l) = self.listeners() {
            l.call(|| CallEvent::ConnectEnd {
                attempt: id.get(),
                route,
            });
            l.connection(|| ConnectionEvent::ConnectEnd {
                attempt: id.get(),
                route,
            });
        }
    }

    /// The race's state machine, built first if it was not.
    pub(super) fn finder(&mut self) -> &mut FastFallbackExchangeFinder {
        match &mut self.state {
            RaceState::Built(finder) => finder,
            // The state is taken only by `end`, after which the race is never polled again.
            _ => unreachable!("the race has not ended"),
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

    /// One turn at `t`: fires the timers that are due, then acts on every output of the race.
    /// Returns how the race ended, once it has.
    pub(super) fn turn(&mut self, t: &mut Moment) -> Option<Ending> {
        let t = t.at();
        if self.finder().poll_timeout().is_some_and(|d| d <= t) {
            self.finder().handle_timeout(t);
        }
        while let Some(out) = self.finder().poll_output(t) {
            if let Some(ending) = self.act(out, t) {
                return Some(ending);
            }
        }
        None
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
        let origin = self.state.built().map(|f| f.address().clone());
        for (spare, plan) in pool.spares.drain(..) {
            let limit = self.inner.policy.attempt_timeout;
            let (attempt, route) = (spare.id, plan.route.target);
            let after = origin
                .as_ref()
                .map(|o| AfterTcp::new(&self.inner, o, &plan));
            let mut step = spare.step;
            if let Step::Tcp(f) = &mut step {
                f.start(&self.inner.socket);
            }
            let done = async move {
                match step {
                    Step::Tcp(f) => {
                        let transport = f.await.ok()?;
                        after?.run(transport).await.ok()
                    }
                    Step::Held(transport) => after?.run(*transport?).await.ok(),
                    Step::Tunnel(f) => {
                        let transport = f.await.ok()?;
                        let mut after = after?;
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

    /// Starts attempt `id` on `plan`: its step, its span, and the listeners' event.
    pub(super) fn start_attempt(&mut self, id: AttemptId, plan: &ConnectPlan) {
        let running = Self::running(&self.inner, self.listeners(), id, plan);
        self.running.push(running);
    }

    /// Attempt `id` on `plan`, started: its step (the socket opens when it is first
    /// polled), its span, and the listeners' event.
    #[inline]
    pub(super) fn running(
        inner: &Inner,
        listeners: Option<&crate::events::Listeners>,
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
        let span = tracing::debug_span!(
            "attempt",
            id = id.get(),
            route = %target,
            family = if target.is_ipv6() { "IPv6" } else { "IPv4" },
        );
        let step = match &inner.dialer {
            None => TcpStep::Unstarted(target),
            Some(dialer) => TcpStep::Dialed(dialer.dial(target, &inner.socket)),
        };
        Running {
            id,
            step: Step::Tcp(step),
            // Kept only when a subscriber wants it: a disabled span costs nothing.
            span: (!span.is_disabled()).then(|| Box::new(span)),
        }
    }
}
