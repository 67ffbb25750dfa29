//! One attempt's record and state.
//!
//! ```text
//!   start ──▶ Connecting ──TcpConnected──▶ Securing ──Connected──▶ Won
//!                 │  │  │  (held plan) └──▶ Held ──HTTPS answer──▶ Securing
//!                 │  │  └─(through a proxy)─▶ Tunneling ──TunnelOpen──▶ Securing
//!                 │  │                           └──Connected (no TLS)──▶ Won
//!                 │  └────────Connected (plan without TLS)────────▶ Won
//!                 │                            │
//!                 ├──────── Failed ────────────┴──────────────────▶ Failed
//!                 ├──────── FollowUp ─────────────────────────────▶ FollowedUp
//!                 └──────── the race cancels it (lost, evicted, ──▶ Cancelled
//!                           timed out, deadline, abandoned)
//! ```
//!
//! Every attempt ends exactly once. Events for an attempt that already ended are ignored.
//!
//! Each move into `Securing` comes with an output that lets TLS start: `StartTls` after
//! `TcpConnected` or `TunnelOpen`, `ResumeAttempt` after `Held`.

use fastfallback_proto::{Alpn, AttemptError, AttemptId, CancelReason, Instant, Phase};

use crate::ConnectPlan;

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

    /// Why it ended badly, if it did: its failure, or the error recorded when it was cancelled.
    pub fn error(&self) -> Option<&AttemptError> {
        match &self.state {
            AttemptState::Failed(e) | AttemptState::Cancelled { error: e, .. } => Some(e),
            _ => None,
        }
    }
}
