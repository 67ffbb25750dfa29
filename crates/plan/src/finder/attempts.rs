//! Attempts: starting them, taking in their progress, and ending each exactly once.

use smallvec::SmallVec;

use fastfallback_proto::{
    AttemptError, AttemptErrorKind, AttemptEvent, AttemptId, CancelReason, Instant, Output, Phase,
    Winner,
};
use fastfallback_route::{Address, LessonKind, Route};

use super::FastFallbackExchangeFinder;
use super::pacing::Pacing;
use crate::attempt::{AttemptRecord, AttemptState};
use crate::policy::HARD_MIN_ATTEMPT_DELAY;
use crate::timer::Timer;
use crate::{ConnectPlan, WinAt};

/// Every attempt of a race, in start order (a slice; the first is kept inline, as most races
/// need no second).
#[derive(Clone, Debug, Default)]
pub struct Attempts(SmallVec<[AttemptRecord; 1]>);

impl std::ops::Deref for Attempts {
    type Target = [AttemptRecord];
    #[inline]
    fn deref(&self) -> &[AttemptRecord] {
        &self.0
    }
}

impl std::ops::DerefMut for Attempts {
    #[inline]
    fn deref_mut(&mut self) -> &mut [AttemptRecord] {
        &mut self.0
    }
}

impl FastFallbackExchangeFinder {
    // ---- inputs ----

    /// Takes in progress of one attempt. Events for unknown or finished attempts are ignored.
    pub fn handle_attempt(
        &mut self,
        id: AttemptId,
        event: AttemptEvent<ConnectPlan>,
        now: Instant,
    ) {
        let now = self.clock(now);
        let Some(i) = self.live_index(id) else {
            return;
        };
        self.needs_decision = true;
        match event {
            AttemptEvent::TcpConnected => self.on_tcp_connected(i, now),
            AttemptEvent::TunnelOpen => self.on_tunnel_open(i),
            AttemptEvent::Connected(alpn) => {
                if self.attempts[i].tcp_connected.is_none() {
                    self.note_tcp(i, now);
                }
                // An attempt connects once, so its record holds no protocol yet; a plain TCP
                // connect brings none either, and leaves the record as it is.
                if alpn.is_some() {
                    self.attempts[i].alpn = alpn;
                }
                self.win(Winner::Attempt(id), Some(i), now);
            }
            AttemptEvent::Failed { error, follow_up } => {
                let (target, over_tcp) = (self.attempts[i].target(), self.attempts[i].over_tcp());
                let (kind, phase) = (error.kind, error.phase);
                if self.end(i, AttemptState::Failed(error), now) {
                    // A QUIC failure is judged when the race ends (`judge_quic`).
                    if over_tcp {
                        self.learn(target, now, LessonKind::Failed { kind, phase });
                    }
                    if let Some(plan) = follow_up {
                        self.rare_mut().deferred.push(plan);
                    }
                }
            }
            AttemptEvent::FollowUp(plan) => {
                if self.end(i, AttemptState::FollowedUp, now) {
                    self.rare_mut().deferred.push(plan);
                }
            }
        }
        self.rearm();
    }

    // ---- getters ----

    /// Every attempt so far, in start order.
    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.attempts
    }

    /// One attempt's record.
    #[inline]
    pub fn attempt(&self, id: AttemptId) -> Option<&AttemptRecord> {
        self.attempts.get(Self::index_of(id))
    }

    /// The origin and every attempt, in start order, taking the race apart without copying
    /// (for a report kept after the race).
    pub fn into_parts(self) -> (Address, Attempts) {
        (self.address, self.attempts)
    }

    /// Attempts in flight now.
    pub fn in_flight(&self) -> usize {
        // Counted as attempts start and end; the count must agree with the records.
        debug_assert_eq!(
            self.live as usize,
            self.attempts.iter().filter(|a| a.in_flight()).count()
        );
        self.live as usize
    }

    // ---- internals ----

    pub(super) fn index_of(id: AttemptId) -> usize {
        // Ids are handed out from AttemptId::FIRST, one per attempt, in order.
        id.get() as usize - 1
    }

    pub(super) fn live_index(&self, id: AttemptId) -> Option<usize> {
        let i = Self::index_of(id);
        self.attempts.get(i).filter(|a| a.in_flight()).map(|_| i)
    }

    /// Starts the next plan: a queued one first, else the next untried endpoint. Returns
    /// whether one started.
    pub(super) fn launch(&mut self, now: Instant) -> bool {
        let plan = match self.pop_deferred() {
            Some(plan) => plan,
            None => {
                let Some(i) = self.endpoints.iter().position(|e| self.startable(e)) else {
                    return false;
                };
                let e = &mut self.endpoints[i];
                e.tried = true;
                let route = Route {
                    target: e.target,
                    logical: e.logical,
                    proxy: self.address.proxy_shared().cloned(),
                };
                let (variant, without_svcb, transport) =
                    (e.tls_variant, e.without_svcb, e.transport);
                let mut plan = ConnectPlan::new(route, self.tls_for(variant));
                plan.without_svcb = without_svcb;
                plan.transport = transport;
                // No ClientHello before SVCB resolution has finished (draft-ietf-tls-esni;
                // HEv3 §6.1 R-34): TCP may go ahead, TLS waits for the HTTPS answer. A QUIC
                // endpoint does not start until then (`startable`).
                plan.hold_tls = plan.tls.is_some() && self.resolution.holds_tls();
                plan
            }
        };
        let id = match self.attempts.last() {
            None => AttemptId::FIRST,
            Some(a) => match a.id.next() {
                Some(id) => id,
                // Four billion attempts in one race: refuse to start more.
                None => return false,
            },
        };
        let target = plan.route.target;
        let deadline = self
            .timers
            .get(Timer::Deadline)
            .unwrap_or_else(|| now + self.policy.connect_timeout);
        let timeout_at = (now + self.policy.attempt_timeout).min(deadline);
        self.live += 1;
        self.attempts.0.push(AttemptRecord {
            id,
            plan,
            started: now,
            tcp_connected: None,
            ended: None,
            state: AttemptState::Connecting,
            alpn: None,
            timeout_at,
            exchange: self.exchange,
        });
        let cad = self.attempt_delay(target).max(HARD_MIN_ATTEMPT_DELAY);
        self.pacing = Pacing {
            last_start: Some(now),
            latest: Some(id),
            next_at: Some(now + cad),
        };
        self.out.push_back(Output::StartAttempt { id });
        true
    }

    /// Records the end of attempt `i`'s TCP handshake: a measured RTT sample. A QUIC
    /// attempt's one handshake is learned as its sample too (one round trip, as TCP's), but
    /// it has no TCP step to record.
    pub(super) fn note_tcp(&mut self, i: usize, now: Instant) {
        let a = &mut self.attempts[i];
        if a.plan.transport == fastfallback_proto::TransportKind::Tcp {
            a.tcp_connected = Some(now);
        }
        let (target, rtt) = (a.plan.route.target, now - a.started);
        self.learn(target, now, LessonKind::Connected { rtt });
    }

    /// Attempt `i`'s TCP handshake finished: it moves on as its plan says (the module's
    /// diagram in `attempt.rs`), and TLS may start ([`Output::StartTls`]) unless the plan holds
    /// it or opens a tunnel first. A second report, or one for an attempt past TCP, is ignored.
    fn on_tcp_connected(&mut self, i: usize, now: Instant) {
        let a = &mut self.attempts[i];
        if a.tcp_connected.is_some() || a.state.tcp_connected(&a.plan).is_err() {
            return;
        }
        self.note_tcp(i, now);
        if self.attempts[i].plan.tls.is_none() {
            return;
        }
        let id = self.attempts[i].id;
        match self.attempts[i].state {
            AttemptState::Held if !self.resolution.holds_tls() => self.resume(i, now),
            AttemptState::Securing => self.out.push_back(Output::StartTls(id)),
            _ => {}
        }
        match self.policy.win_at {
            WinAt::Tcp => {
                // OkHttp R6: the TCP winner does TLS alone; the others stop now. Not an
                // attempt that resuming just withdrew (its endpoint is no longer listed): it
                // has ended, and owning TLS would stop the race with nothing left in flight.
                if self.attempts[i].ended.is_none() && self.phase.own_tls(id).is_ok() {
                    self.cancel_in_flight(CancelReason::LostRace, Some(id), now);
                }
            }
            WinAt::Handshake => {
                // HEv3 §6.1, profile P6: extend the timer to an estimate of full establishment.
                if self.pacing.latest == Some(id)
                    && let Some(t) = self.pacing.next_at.filter(|t| now < *t)
                {
                    let cad = self.attempt_delay(self.attempts[i].plan.route.target);
                    self.pacing.next_at = Some(t.max(now + cad));
                }
            }
        }
    }

    /// Attempt `i`'s proxy tunnel is open: TLS follows ([`Output::StartTls`]), if its plan has
    /// it (a plan without TLS stays in the tunnel step until it is reported connected).
    fn on_tunnel_open(&mut self, i: usize) {
        let a = &mut self.attempts[i];
        if a.plan.tls.is_some() && a.state.tunnel_opened().is_ok() {
            self.out.push_back(Output::StartTls(a.id));
        }
    }

    /// Ends attempt `i` in `state`, if it is still in flight: returns whether it ended now
    /// (an attempt ends exactly once; a second end changes nothing). The TLS owner's end lets
    /// the race go on.
    pub(super) fn end(&mut self, i: usize, state: AttemptState, now: Instant) -> bool {
        let a = &mut self.attempts[i];
        if a.state.end(state).is_err() {
            return false;
        }
        a.ended = Some(now);
        self.phase.owner_ended(a.id);
        self.live -= 1;
        true
    }

    /// The one way the race stops an attempt, whatever the reason. The error records the step
    /// the attempt was in; route memory learns a lower bound on the route's RTT if its TCP
    /// handshake never finished, and a failure if it timed out (a QUIC attempt teaches the
    /// route neither: see `judge_quic`); a loser's plan is queued for reuse (OkHttp's
    /// deferred plans).
    pub(super) fn cancel(&mut self, i: usize, reason: CancelReason, now: Instant) {
        let a = &self.attempts[i];
        let (id, target, step, over_tcp) = (a.id, a.target(), a.state.step(), a.over_tcp());
        let elapsed = now - a.started;
        let (kind, detail) = match reason {
            CancelReason::AttemptTimeout => (
                AttemptErrorKind::TimedOut,
                format!("no answer within {:?}", self.policy.attempt_timeout),
            ),
            CancelReason::Deadline => (AttemptErrorKind::TimedOut, reason.to_string()),
            CancelReason::LostRace
            | CancelReason::Overtaken
            | CancelReason::Evicted
            | CancelReason::Abandoned
            | CancelReason::Withdrawn => (AttemptErrorKind::Cancelled, reason.to_string()),
        };
        let error = AttemptError::new(kind, step, detail);
        if !self.end(i, AttemptState::Cancelled { reason, error }, now) {
            return;
        }
        if over_tcp && step == Phase::Tcp {
            self.learn(target, now, LessonKind::Unfinished { elapsed });
        }
        if over_tcp && reason == CancelReason::AttemptTimeout {
            let phase = step;
            self.learn(target, now, LessonKind::Failed { kind, phase });
        }
        if matches!(reason, CancelReason::LostRace | CancelReason::Overtaken) {
            let retry = self.attempts[i].plan.retry();
            self.rare_mut().deferred.insert(0, retry);
        }
        self.out.push_back(Output::CancelAttempt { id, reason });
    }

    /// Cancels every attempt in flight except `keep`, in start order.
    pub(super) fn cancel_in_flight(
        &mut self,
        reason: CancelReason,
        keep: Option<AttemptId>,
        now: Instant,
    ) {
        for i in 0..self.attempts.len() {
            if self.live == 0 {
                break;
            }
            let a = &self.attempts[i];
            if a.in_flight() && Some(a.id) != keep {
                self.cancel(i, reason, now);
            }
        }
    }

    pub(super) fn evict_oldest(&mut self, now: Instant) {
        if let Some(i) = self.attempts.iter().position(AttemptRecord::in_flight) {
            self.cancel(i, CancelReason::Evicted, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use fastfallback_proto::{AttemptEvent, Instant, Output};
    use fastfallback_route::{Address, Connectivity, Host, Proxy};

    use super::*;
    use crate::{FallbackPolicy, RaceInput};

    fn ms(t: u64) -> Instant {
        Instant::from_millis(t)
    }

    /// A race to `address` (an IP literal) through an HTTP proxy if `proxy`, and its first
    /// attempt, started at 0.
    fn one_attempt(address: &str, proxy: bool) -> (FastFallbackExchangeFinder, AttemptId) {
        let mut addr = Address::parse(address).unwrap();
        if proxy {
            addr = addr.with_proxy(Proxy::http(Host::Ip("192.0.2.9".parse().unwrap()), 3128));
        }
        let input = RaceInput::new(Connectivity::DUAL_STACK);
        let mut race =
            FastFallbackExchangeFinder::new(addr, FallbackPolicy::default(), input, ms(0));
        let Some(Output::StartAttempt { id }) = race.poll_output(ms(0)) else {
            panic!("no start");
        };
        assert_eq!(race.poll_output(ms(0)), None);
        (race, id)
    }

    #[test]
    fn a_tunnel_reported_open_before_tcp_connected_starts_no_tls() {
        let (mut race, id) = one_attempt("https://[2001:db8::a]", true);
        race.handle_attempt(id, AttemptEvent::TunnelOpen, ms(10));
        assert_eq!(race.poll_output(ms(10)), None);
        assert_eq!(race.attempt(id).unwrap().state, AttemptState::Connecting);
        // In order, the same reports go through.
        race.handle_attempt(id, AttemptEvent::TcpConnected, ms(20));
        assert_eq!(race.attempt(id).unwrap().state, AttemptState::Tunneling);
        race.handle_attempt(id, AttemptEvent::TunnelOpen, ms(30));
        assert_eq!(race.poll_output(ms(30)), Some(Output::StartTls(id)));
    }

    #[test]
    fn a_tunnel_reported_open_on_an_attempt_without_one_starts_no_second_tls() {
        let (mut race, id) = one_attempt("https://[2001:db8::a]", false);
        race.handle_attempt(id, AttemptEvent::TcpConnected, ms(20));
        assert_eq!(race.poll_output(ms(20)), Some(Output::StartTls(id)));
        race.handle_attempt(id, AttemptEvent::TunnelOpen, ms(30));
        assert_eq!(race.poll_output(ms(30)), None);
        assert_eq!(race.attempt(id).unwrap().state, AttemptState::Securing);
    }
}
