//! A race's turn: acting on the race's outputs, polling what may wake it, handing each
//! event in, and ending it.

use std::net::SocketAddr;
use std::task::{Context, Poll};

use fastfallback_plan::SpareWinners;
use fastfallback_proto::{
    Alpn, AttemptError, AttemptEvent, AttemptId, CancelReason, DnsAnswer, Instant, Output, Winner,
};
use fastfallback_route::Host;

use crate::events::CallEvent;
use crate::link::{Offer, Raced};
use crate::report::{QueryLog, ReportError, Story};
use crate::{Stream, Transport};

use super::clock::*;
use super::connection::Connection;
use super::error::{ConnectError, RaceFailure};
use super::race::*;
use super::steps::*;

impl Race {
    /// One turn at `t`: fires the timers that are due, then acts on every output of the race.
    /// Returns how the race ended, once it has.
    #[inline]
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

    /// Acts on one output of the race. Returns how the race ended, once it has.
    #[inline]
    pub(super) fn act(&mut self, out: Output, t: Instant) -> Option<Ending> {
        match out {
            Output::StartQuery(query) => {
                let cell = self.cell();
                let queries = &mut cell.driver.queries;
                if queries.capacity() == 0 {
                    // Sized once for the first queries (most races send two or three and
                    // nothing more): a race in flight keeps this list.
                    queries.reserve_exact(cell.race.initial_queries());
                }
                // The origin's name is read from the race: a race keeps no copy of it.
                let origin = match self.built().map(|f| f.address().connect_host().0) {
                    Some(Host::Name(n)) => n.as_str(),
                    _ => "",
                };
                let name = query.name.resolve(origin);
                tracing::debug!(%name, kind = %query.kind, "query");
                let answer = self.inner.resolver.query(name, query.kind);
                if let Some(l) = self.listeners() {
                    l.call(|| CallEvent::DnsStart {
                        query: query.clone(),
                    });
                }
                self.cell().driver.queries.push(QueryLog {
                    query,
                    sent: t,
                    answered: None,
                    pending: Some(std::sync::Mutex::new(answer)),
                });
            }
            Output::CancelQuery(query) => {
                for q in self.log().iter_mut().filter(|q| q.query == query) {
                    q.pending = None;
                }
            }
            Output::StartAttempt { id } => self.start_attempt(id),
            Output::CancelAttempt { id, reason } => {
                tracing::debug!(%id, %reason, "attempt cancelled");
                // Kept for the pool: an attempt overtaken by a connection that carries one
                // exchange at a time (the pool is one short), and with `SpareWinners::Pool`
                // any loser.
                let keep = match reason {
                    CancelReason::Overtaken => self
                        .pool
                        .as_ref()
                        .and_then(|p| p.pooled.as_ref())
                        .is_some_and(|lease| !lease.multiplexed()),
                    CancelReason::LostRace => self.inner.policy.spare_winners == SpareWinners::Pool,
                    _ => false,
                };
                if keep
                    && let Some(pool) = &mut self.pool
                    && pool.link.watch.is_some()
                    && let Some(at) = self.running.iter().position(|r| r.id == id)
                    && let Some(plan) = self.state.built().and_then(|f| f.attempt(id))
                {
                    // Kept: it finishes on its own after the race and may be pooled. For the
                    // call it is over.
                    let plan = plan.plan.clone();
                    let spare = take_running(&mut self.running, at);
                    if let Some(l) = pool.link.listeners.call.as_ref() {
                        l.event(&CallEvent::ConnectFailed {
                            attempt: id.get(),
                            route: plan.route.target,
                            error: format!(
                                "cancelled: {reason} (kept, to be pooled if it connects)"
                            ),
                        });
                    }
                    pool.spares.push((spare, plan, reason));
                    return None;
                }
                if self.running.iter().any(|r| r.id == id)
                    && let Some(route) = self.route_of(id)
                {
                    self.attempt_failed(id, route, &format_args!("cancelled: {reason}"));
                }
                // Dropping the future closes the socket now, in this turn.
                self.running.retain(|r| r.id != id);
                if self.finished.as_ref().is_some_and(|(f, ..)| *f == id) {
                    self.finished = None;
                }
            }
            Output::ResumeAttempt { id } => {
                let i = self.running.iter().position(|r| r.id == id)?;
                let Step::Held(transport) = &mut self.running[i].step else {
                    return None;
                };
                let transport = *transport.take()?;
                // The race's record of the attempt holds the plan as decided now.
                if let Some(plan) = self.plan_of(id) {
                    tracing::debug!(%id, %plan, "TLS goes ahead: the HTTPS answer is in");
                }
                self.start_after_tcp(i, transport);
            }
            // This driver goes on to TLS by itself as soon as TCP (or the tunnel) is done, in
            // the same turn that reports it (`on_tcp`, `on_tunnel`): nothing to do.
            Output::StartTls(_) => {}
            Output::Done(Winner::Attempt(id)) => return Some(Ending::Won(id)),
            Output::Done(Winner::Pooled(id)) => return Some(Ending::Pooled(id)),
            Output::Failed(error) => return Some(Ending::Failed(error)),
        }
        None
    }

    /// Closes whatever is left and turns the race into its result.
    #[inline]
    pub(super) fn end(&mut self, ending: Ending) -> Result<Raced, ConnectError> {
        if !self.running.is_empty() {
            self.close_running();
        }
        // The finished attempt's stream stays in its slot until the result takes it: moved
        // once, straight into the connection.
        let stream = match (&ending, self.finished.take()) {
            (Ending::Won(id), Some((f, stream))) if f == *id => Some(stream),
            _ => None,
        };
        let RaceState::Built(mut cell) = std::mem::replace(&mut self.state, RaceState::Ended)
        else {
            return Err(ConnectError::Internal("a race that ended twice"));
        };
        let keep = self.pool.as_mut().map(|p| &mut p.lessons);
        self.inner.learn(self.network.id, &mut cell.race, keep);
        let queries = &mut cell.driver.queries;
        match cell.race.dns_tail_deadline() {
            Some(until) if stream.is_some() => start_dns_tail(queries, until),
            // A story holds no query in flight: the rest are abandoned now.
            _ => queries.iter_mut().for_each(|q| q.pending = None),
        }
        // The race's allocation is the story: it holds the winner, its ALPN, the end (its
        // latest instant) and the query log.
        let story = Story(cell);
        match ending {
            Ending::Won(id) => {
                let Some(stream) = stream else {
                    return Err(ConnectError::Internal("a winner without a stream"));
                };
                tracing::debug!(%id, "race won");
                Ok(Raced::Connected(Connection { stream, story }))
            }
            Ending::Pooled(id) => match self
                .pool
                .as_mut()
                .and_then(|p| p.pooled.take())
                .filter(|l| l.id() == id)
            {
                Some(lease) => {
                    tracing::debug!(%id, "race ended on a pooled connection");
                    Ok(Raced::Pooled { lease, story })
                }
                None => Err(ConnectError::Internal("a pooled winner without its lease")),
            },
            Ending::Failed(error) => {
                let mut report = story.render();
                report.error = Some(ReportError::from(&*error));
                Err(ConnectError::Race(Box::new(RaceFailure {
                    earlier: Vec::new(),
                    error: *error,
                    report,
                })))
            }
        }
    }

    /// Cancels the attempts still running when the race ends: the listeners hear of each,
    /// and dropping them closes their sockets now.
    fn close_running(&mut self) {
        if self.listeners().is_some() {
            for r in &self.running {
                let Some(route) = self.route_of(r.id) else {
                    continue;
                };
                self.attempt_failed(r.id, route, &"cancelled: the race ended");
            }
        }
        self.running.clear();
    }

    /// Polls everything but the timer (the pool's offers, the queries, the attempts) and
    /// hands the first event that is ready to the race, at a clock reading taken then (`t`).
    /// Returns whether there was one. One event per call: a finished attempt must be declared
    /// the winner (in the turn that follows) before another can finish.
    ///
    /// Each event goes straight from the future that gave it to its handler, with no enum of
    /// every kind of event in between to build, move and match again.
    #[inline]
    pub(super) fn poll_event(&mut self, cx: &mut Context<'_>, t: &mut Moment) -> bool {
        if let Some(pool) = &mut self.pool
            && let Poll::Ready(Some(offer)) = pool.link.offers.poll_recv(cx)
        {
            *t = Moment::now();
            self.on_offer(offer, t);
            return true;
        }
        let mut answered = None;
        for (i, q) in self.log().iter_mut().enumerate() {
            if let Some(pending) = &mut q.pending
                && let Poll::Ready(answer) = pending
                    .get_mut()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_mut()
                    .poll(cx)
            {
                q.pending = None;
                answered = Some((i, answer));
                break;
            }
        }
        if let Some((i, answer)) = answered {
            *t = Moment::now();
            self.on_dns(i, answer, t);
            return true;
        }
        for i in 0..self.running.len() {
            let r = &mut self.running[i];
            let id = r.id;
            let span = r.span.as_deref().map(tracing::Span::enter);
            match &mut r.step {
                Step::Tcp(f) => {
                    if let Poll::Ready(res) = f.poll_step(cx, &self.inner.socket) {
                        drop(span);
                        *t = Moment::now();
                        self.on_tcp(i, id, res, t);
                        return true;
                    }
                }
                Step::Tunnel(f) => {
                    if let Poll::Ready(res) = f.as_mut().poll(cx) {
                        drop(span);
                        *t = Moment::now();
                        self.on_tunnel(i, id, res, t);
                        return true;
                    }
                }
                Step::Tls(f) => {
                    if let Poll::Ready(res) = f.as_mut().poll(cx) {
                        drop(span);
                        *t = Moment::now();
                        self.on_tls(i, res, t);
                        return true;
                    }
                }
                // Parked: nothing to poll until the race resumes it.
                Step::Held(_) => {}
            }
        }
        false
    }

    /// Running attempt `i` connected to `route` over plain TCP (or a plain tunnel), with
    /// nothing after it: it is the race's finished attempt, and the race hears so at `t`.
    #[inline]
    fn connected_plain(
        &mut self,
        i: usize,
        route: SocketAddr,
        transport: Transport,
        t: &mut Moment,
    ) {
        let done = take_running(&mut self.running, i);
        let id = done.id;
        if done.is_spent() {
            // It holds nothing (its stream is `transport`): dropping it would only walk the
            // drop glue of every kind of step to find that out.
            std::mem::forget(done);
        }
        self.attempt_connected(id, route);
        self.finished = Some((id, Stream::Plain(transport)));
        self.finder()
            .handle_attempt(id, AttemptEvent::Connected(None), t.at());
    }

    /// Hands the race an offer from the pool: a pooled connection, or news that the connect
    /// this race waited for has ended.
    fn on_offer(&mut self, offer: Offer, t: &mut Moment) {
        match offer {
            Offer::Pooled(lease) => {
                // A race that ended already refuses it; dropping the lease gives it back.
                if self.finder().handle_pooled(lease.id(), t.at())
                    && let Some(pool) = &mut self.pool
                {
                    pool.pooled = Some(lease);
                }
            }
            Offer::Release(news) => self.finder().handle_release(&news, t.at()),
        }
    }

    /// Hands the race the answer to query `i` of its log.
    fn on_dns(&mut self, i: usize, answer: DnsAnswer, t: &mut Moment) {
        let Some(query) = self.log().get(i).map(|q| q.query.clone()) else {
            return;
        };
        let sources = self.inner.sources.find(&self.network.connectivity, &answer);
        // Only the origin's own A and AAAA answers count for coalescing, not HTTPS hints or a
        // service target's addresses (§3.7).
        if let Some(watch) = self.pool.as_ref().and_then(|p| p.link.watch.as_ref())
            && query.is_origin()
            && matches!(answer, DnsAnswer::Addresses(_))
            && !sources.is_empty()
        {
            let dsts: Vec<_> = sources.iter().map(|s| s.dst).collect();
            watch.resolved(&dsts);
        }
        if let Some(l) = self.listeners() {
            l.call(|| CallEvent::DnsEnd {
                query: query.clone(),
                answer: answer.clone(),
            });
        }
        self.finder().handle_dns(query, &answer, sources, t.at());
        // The report keeps the answer itself; the race took what it needed.
        if let Some(q) = self.log().get_mut(i) {
            q.answered = Some((t.at(), answer));
        }
    }

    /// Hands the race the end of running attempt `i` (`id`)'s TCP step (or its user's
    /// dialer).
    #[inline]
    fn on_tcp(
        &mut self,
        i: usize,
        id: AttemptId,
        res: Result<Transport, AttemptError>,
        t: &mut Moment,
    ) {
        let Some(transport) = self.succeeded(i, res, t) else {
            return;
        };
        let Some(plan) = self.plan_of(id) else {
            return;
        };
        let route = plan.route.target;
        if plan.tls.is_none() && !plan.tunnel {
            // Nothing follows TCP: the attempt is done (checked before building the next
            // step, which costs a few reference counts on every connect).
            self.connected_plain(i, route, transport, t);
            return;
        }
        if plan.hold_tls {
            // No ClientHello yet: the race resumes it once the HTTPS answer is in.
            self.running[i].step = Step::Held(Some(Box::new(transport)));
        } else {
            self.start_after_tcp(i, transport);
        }
        self.finder()
            .handle_attempt(id, AttemptEvent::TcpConnected, t.at());
    }

    /// Hands the race the end of running attempt `i` (`id`)'s proxy tunnel.
    fn on_tunnel(
        &mut self,
        i: usize,
        id: AttemptId,
        res: Result<Transport, AttemptError>,
        t: &mut Moment,
    ) {
        let Some(transport) = self.succeeded(i, res, t) else {
            return;
        };
        let Some(plan) = self.plan_of(id) else {
            return;
        };
        let (route, tls) = (plan.route.target, plan.tls.is_some());
        self.finder()
            .handle_attempt(id, AttemptEvent::TunnelOpen, t.at());
        if tls {
            self.start_tls(i, transport);
        } else {
            self.connected_plain(i, route, transport, t);
        }
    }

    /// Hands the race the end of running attempt `i`'s TLS handshake (or QUIC's).
    fn on_tls(&mut self, i: usize, res: TlsResult, t: &mut Moment) {
        let Some((stream, alpn)) = self.succeeded(i, res, t) else {
            return;
        };
        let done = take_running(&mut self.running, i);
        let id = done.id;
        if let Some(l) = self.listeners() {
            l.call(|| CallEvent::SecureConnectEnd {
                attempt: id.get(),
                alpn: alpn.as_ref().map(ToString::to_string),
            });
        }
        if let Some(route) = self.route_of(id) {
            self.attempt_connected(id, route);
        }
        self.finished = Some((id, stream));
        self.finder()
            .handle_attempt(id, AttemptEvent::Connected(alpn), t.at());
    }

    /// What running attempt `i`'s step ended with, if it succeeded; a failure is handed to
    /// the race here ([`Self::on_failed`]).
    #[inline]
    fn succeeded<T>(
        &mut self,
        i: usize,
        res: Result<T, AttemptError>,
        t: &mut Moment,
    ) -> Option<T> {
        match res {
            Ok(done) => Some(done),
            Err(error) => {
                self.on_failed(i, error, t);
                None
            }
        }
    }

    /// Hands the race the failure of running attempt `i`, in whichever step, with the plan
    /// to follow it up with, if the failure calls for one.
    fn on_failed(&mut self, i: usize, error: AttemptError, t: &mut Moment) {
        let id = take_running(&mut self.running, i).id;
        tracing::debug!(%id, %error, "attempt failed");
        let Some(failed) = self.plan_of(id) else {
            return;
        };
        self.attempt_failed(id, failed.route.target, &error);
        let follow_up = fastfallback_plan::tls_follow_up(
            failed,
            error.phase,
            &crate::ech::tls_failure(&error),
            self.inner.tls_fallbacks.len(),
        );
        self.finder()
            .handle_attempt(id, AttemptEvent::Failed { error, follow_up }, t.at());
    }
}

/// Keeps the queries still in flight until the end of the DNS tail the race chose (HEv3 §6),
/// so their answers reach the resolver's cache for the next race.
fn start_dns_tail(queries: &mut [QueryLog], until: Instant) {
    let runtime = tokio::runtime::Handle::try_current().is_ok();
    let until = tokio_instant(until);
    let pending = queries.iter_mut().filter_map(|q| q.pending.take());
    for answer in pending.map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner())) {
        // Outside a runtime the answer is abandoned (taken, and dropped here).
        if runtime {
            tokio::spawn(async move {
                let _ = tokio::time::timeout_at(until, answer).await;
            });
        }
    }
}

/// What a TLS (or QUIC) step ends with: the stream and the protocol ALPN chose, or why not.
type TlsResult = Result<(Stream, Option<Alpn>), AttemptError>;

/// Takes running attempt `i` out of `running`; the others keep their order. The last one (a
/// race's only one, most often) is popped, which moves nothing else: `remove` would still call
/// `memmove` for the empty tail.
#[inline]
fn take_running(running: &mut smallvec::SmallVec<[Running; 1]>, i: usize) -> Running {
    if i + 1 == running.len()
        && let Some(last) = running.pop()
    {
        return last;
    }
    running.remove(i)
}
