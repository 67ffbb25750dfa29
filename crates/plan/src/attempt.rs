//! One attempt's record and state.
//!
//! ```text
//!   start ──▶ Connecting ──TcpConnected──▶ Securing ──Connected──▶ Won
//!                 │  │  │  (held plan) └──▶ Held ──HTTPS answer──▶ Securing
//!                 │  │  └─(through a proxy)─▶ Tunneling ──TunnelOpen──▶ Securing
//!                 │  │                           └──Connected (no TLS)──▶ Won
//!                 │  └────────Connected (plan without TLS, ───────▶ Won
//!                 │            or a QUIC plan: one handshake)
//!                 │                            │
//!                 ├──────── Failed ────────────┴──────────────────▶ Failed
//!                 ├──────── FollowUp ─────────────────────────────▶ FollowedUp
//!                 └──────── the race cancels it (lost, evicted, ──▶ Cancelled
//!                           timed out, deadline, abandoned)
//! ```
//!
//! Every attempt ends exactly once. Events for an attempt that already ended are ignored.
//!
//! The race moves an attempt only through the methods below, one for each arrow: each refuses
//! ([`IllegalMove`]) a move the diagram does not draw from where the attempt is, and leaves the
//! state as it was.
//!
//! Each move into `Securing` comes with an output that lets TLS start: `StartTls` after
//! `TcpConnected` or `TunnelOpen`, `ResumeAttempt` after `Held`.

use fastfallback_proto::{Alpn, AttemptError, AttemptId, CancelReason, Instant, Phase};

use crate::ConnectPlan;
use crate::transition::IllegalMove;

/// Where an attempt is (see the module's state diagram).
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum AttemptState {
    /// In flight: the TCP handshake.
    Connecting,
    /// In flight: TCP to the proxy connected, the tunnel (HTTP `CONNECT`, SOCKS5) is being
    /// opened.
    Tunneling,
    /// In flight: TCP connected, the TLS handshake is running.
    Securing,
    /// In flight: TCP connected, TLS held until the HTTPS answer is in
    /// ([`crate::ConnectPlan::hold_tls`]).
    Held,
    /// It won the race.
    Won,
    /// It failed.
    Failed(AttemptError),
    /// It asked for a follow-up plan instead of finishing (not an error).
    FollowedUp,
    /// The race stopped it.
    Cancelled {
        /// Why.
        reason: CancelReason,
        /// The error recorded for it, with the step it was in.
        error: AttemptError,
    },
}

impl AttemptState {
    /// Whether the attempt is still running.
    pub fn in_flight(&self) -> bool {
        matches!(
            self,
            Self::Connecting | Self::Tunneling | Self::Securing | Self::Held
        )
    }

    /// The step a running attempt is in: TCP until its handshake completes, then the proxy
    /// tunnel if it has one, then TLS.
    pub(crate) fn step(&self) -> Phase {
        match self {
            Self::Tunneling => Phase::Tunnel,
            Self::Securing | Self::Held => Phase::Tls,
            _ => Phase::Tcp,
        }
    }

    /// The state's name, as the diagram writes it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Connecting => "Connecting",
            Self::Tunneling => "Tunneling",
            Self::Securing => "Securing",
            Self::Held => "Held",
            Self::Won => "Won",
            Self::Failed(_) => "Failed",
            Self::FollowedUp => "FollowedUp",
            Self::Cancelled { .. } => "Cancelled",
        }
    }

    /// Moves to `to` if `allowed`, else refuses and stays.
    fn go(&mut self, allowed: bool, to: Self) -> Result<(), IllegalMove> {
        if !allowed {
            return Err(IllegalMove {
                from: self.name(),
                to: to.name(),
            });
        }
        // Every arrow of the diagram leaves an in-flight state, and those own nothing: the
        // state left needs no drop (skipping its drop glue is what `forget` is for here).
        debug_assert!(self.in_flight(), "a move from {}", self.name());
        std::mem::forget(std::mem::replace(self, to));
        Ok(())
    }

    /// TCP connected on a plan that opens a proxy tunnel next: `Connecting → Tunneling`.
    pub(crate) fn begin_tunnel(&mut self) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Connecting);
        self.go(allowed, Self::Tunneling)
    }

    /// TCP connected and TLS may start at once: `Connecting → Securing`.
    pub(crate) fn begin_tls(&mut self) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Connecting);
        self.go(allowed, Self::Securing)
    }

    /// TCP connected on a plan that holds TLS until the HTTPS answer is in:
    /// `Connecting → Held`.
    pub(crate) fn hold_tls(&mut self) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Connecting);
        self.go(allowed, Self::Held)
    }

    /// The TCP handshake of an attempt that runs `plan` finished: the move its plan calls for
    /// ([`Self::hold_tls`], [`Self::begin_tunnel`] or [`Self::begin_tls`]), or, for a plan
    /// with neither a tunnel nor TLS, none (it stays `Connecting` until it is reported
    /// connected). Refused unless the attempt is `Connecting`, and always for a QUIC plan,
    /// whose one handshake has no TCP step (HEv3 §6.1).
    pub(crate) fn tcp_connected(&mut self, plan: &ConnectPlan) -> Result<(), IllegalMove> {
        let tls = plan.tls.is_some();
        if plan.transport == fastfallback_proto::TransportKind::Quic {
            self.go(false, Self::Connecting)
        } else if tls && plan.hold_tls {
            // Through a proxy too: a held plan waits for the HTTPS answer, then resumes.
            self.hold_tls()
        } else if plan.tunnel {
            self.begin_tunnel()
        } else if tls {
            self.begin_tls()
        } else {
            let allowed = matches!(self, Self::Connecting);
            self.go(allowed, Self::Connecting)
        }
    }

    /// The proxy tunnel is open and TLS may start: `Tunneling → Securing`.
    pub(crate) fn tunnel_opened(&mut self) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Tunneling);
        self.go(allowed, Self::Securing)
    }

    /// The HTTPS answer is in (or no longer awaited) and a held attempt goes on to TLS:
    /// `Held → Securing`.
    pub(crate) fn resume_tls(&mut self) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Held);
        self.go(allowed, Self::Securing)
    }

    /// Ends the attempt in `last` (`Won`, `Failed`, `FollowedUp` or `Cancelled`), from any
    /// in-flight state. Refused for an attempt that has ended already (it ends exactly once)
    /// and for a `last` that is not an end.
    pub(crate) fn end(&mut self, last: Self) -> Result<(), IllegalMove> {
        let allowed = self.in_flight() && !last.in_flight();
        self.go(allowed, last)
    }
}

/// Everything the race knows about one attempt: the basis of its report.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct AttemptRecord {
    /// The attempt.
    pub id: AttemptId,
    /// What it did.
    pub plan: ConnectPlan,
    /// When it started.
    pub started: Instant,
    /// When its TCP handshake finished, if it did.
    pub tcp_connected: Option<Instant>,
    /// When it ended, if it has.
    pub ended: Option<Instant>,
    /// Where it is now.
    pub state: AttemptState,
    /// The ALPN protocol the server chose, for a winner.
    pub alpn: Option<Alpn>,
    pub(crate) timeout_at: Instant,
    pub(crate) exchange: u32,
}

impl AttemptRecord {
    /// Whether the attempt is still running.
    pub fn in_flight(&self) -> bool {
        self.state.in_flight()
    }

    /// The address it connects to: its route's key in route memory.
    pub fn target(&self) -> std::net::SocketAddr {
        self.plan.route.target
    }

    /// Whether it connects over TCP. Only such an attempt teaches its route anything but an
    /// RTT: a QUIC attempt that fails or lags says something about UDP, not about the route
    /// (route memory keeps a broken-QUIC record for that instead).
    pub fn over_tcp(&self) -> bool {
        self.plan.transport == fastfallback_proto::TransportKind::Tcp
    }

    /// Why it ended badly, if it did: its failure, or the error recorded when it was cancelled.
    pub fn error(&self) -> Option<&AttemptError> {
        match &self.state {
            AttemptState::Failed(e) | AttemptState::Cancelled { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fastfallback_proto::{AttemptErrorKind, CancelReason};
    use fastfallback_route::Route;

    use super::*;
    use crate::TlsStep;

    fn failed() -> AttemptState {
        AttemptState::Failed(AttemptError::new(
            AttemptErrorKind::Refused,
            Phase::Tcp,
            "refused",
        ))
    }

    fn cancelled() -> AttemptState {
        let error = AttemptError::new(AttemptErrorKind::Cancelled, Phase::Tls, "lost the race");
        AttemptState::Cancelled {
            reason: CancelReason::LostRace,
            error,
        }
    }

    /// A plan to 192.0.2.1:443, with TLS if `tls`, through a tunnel if `tunnel`, holding TLS
    /// if `hold`.
    fn plan(tls: bool, tunnel: bool, hold: bool) -> ConnectPlan {
        let step = TlsStep {
            server_name: "example.com".to_owned(),
            alpn: Vec::new(),
            config: 0,
            ech: None,
            ech_retry: false,
        };
        let route = Route::direct("192.0.2.1:443".parse().unwrap());
        let mut plan = ConnectPlan::new(route, tls.then(|| Arc::new(step)));
        plan.tunnel = tunnel;
        plan.hold_tls = hold;
        plan
    }

    /// Asks `state` for `step`, and checks that it was refused and changed nothing.
    fn refused(
        mut state: AttemptState,
        step: impl FnOnce(&mut AttemptState) -> Result<(), IllegalMove>,
        to: &'static str,
    ) {
        let before = state.clone();
        let from = before.name();
        assert_eq!(step(&mut state), Err(IllegalMove { from, to }));
        assert_eq!(state, before, "a refused move changes nothing");
    }

    #[test]
    fn a_failed_attempt_cannot_start_tls() {
        refused(failed(), AttemptState::begin_tls, "Securing");
        refused(failed(), AttemptState::resume_tls, "Securing");
        refused(failed(), AttemptState::tunnel_opened, "Securing");
    }

    #[test]
    fn a_cancelled_attempt_cannot_connect_again() {
        let tls = plan(true, false, false);
        refused(cancelled(), |s| s.tcp_connected(&tls), "Securing");
        refused(cancelled(), AttemptState::begin_tunnel, "Tunneling");
        refused(cancelled(), AttemptState::hold_tls, "Held");
    }

    #[test]
    fn an_attempt_ends_exactly_once() {
        let mut state = AttemptState::Securing;
        assert_eq!(state.end(AttemptState::Won), Ok(()));
        assert_eq!(state, AttemptState::Won);
        refused(AttemptState::Won, |s| s.end(failed()), "Failed");
        refused(failed(), |s| s.end(AttemptState::Won), "Won");
        refused(
            AttemptState::FollowedUp,
            |s| s.end(cancelled()),
            "Cancelled",
        );
        refused(
            cancelled(),
            |s| s.end(AttemptState::FollowedUp),
            "FollowedUp",
        );
    }

    #[test]
    fn an_attempt_cannot_end_in_a_state_that_is_still_in_flight() {
        refused(
            AttemptState::Connecting,
            |s| s.end(AttemptState::Securing),
            "Securing",
        );
        refused(AttemptState::Held, |s| s.end(AttemptState::Held), "Held");
    }

    #[test]
    fn only_a_tunnelling_attempt_has_its_tunnel_opened() {
        refused(
            AttemptState::Connecting,
            AttemptState::tunnel_opened,
            "Securing",
        );
        refused(
            AttemptState::Securing,
            AttemptState::tunnel_opened,
            "Securing",
        );
        refused(AttemptState::Held, AttemptState::tunnel_opened, "Securing");
        let mut state = AttemptState::Tunneling;
        assert_eq!(state.tunnel_opened(), Ok(()));
        assert_eq!(state, AttemptState::Securing);
    }

    #[test]
    fn only_a_held_attempt_resumes_tls() {
        refused(
            AttemptState::Connecting,
            AttemptState::resume_tls,
            "Securing",
        );
        refused(
            AttemptState::Tunneling,
            AttemptState::resume_tls,
            "Securing",
        );
        refused(AttemptState::Securing, AttemptState::resume_tls, "Securing");
        let mut state = AttemptState::Held;
        assert_eq!(state.resume_tls(), Ok(()));
        assert_eq!(state, AttemptState::Securing);
    }

    #[test]
    fn tcp_connects_only_from_connecting() {
        for state in [
            AttemptState::Tunneling,
            AttemptState::Securing,
            AttemptState::Held,
            AttemptState::Won,
        ] {
            refused(
                state.clone(),
                |s| s.tcp_connected(&plan(true, false, false)),
                "Securing",
            );
            refused(
                state,
                |s| s.tcp_connected(&plan(false, false, false)),
                "Connecting",
            );
        }
    }

    #[test]
    fn a_tcp_connect_takes_the_move_its_plan_calls_for() {
        let cases = [
            (plan(false, false, false), AttemptState::Connecting),
            (plan(true, false, false), AttemptState::Securing),
            (plan(true, false, true), AttemptState::Held),
            (plan(true, true, false), AttemptState::Tunneling),
            (plan(false, true, false), AttemptState::Tunneling),
            (plan(true, true, true), AttemptState::Held),
        ];
        for (plan, want) in cases {
            let mut state = AttemptState::Connecting;
            assert_eq!(state.tcp_connected(&plan), Ok(()), "{plan:?}");
            assert_eq!(state, want, "{plan:?}");
        }
    }
}
