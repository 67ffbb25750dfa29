//! The TLS step of each attempt: which one it takes (the race's own, or with its service's
//! ECH configuration), and when a plan that holds TLS for the HTTPS answer may go on.

use std::sync::Arc;

use fastfallback_proto::{AlpnOffer, CancelReason, Instant, Output};
use fastfallback_route::{Address, Host};

use super::FastFallbackExchangeFinder;
use crate::TlsStep;
use crate::attempt::AttemptState;

impl FastFallbackExchangeFinder {
    /// The TLS step every attempt of this race shares, for TLS origins.
    /// The TLS step of every attempt to `address`: SNI names the origin (RFC 9460 §9.4), and
    /// ALPN offers what the policy says the client speaks (HEv3 §6.2).
    #[inline(always)]
    pub(super) fn tls_step(address: &Address, offer: AlpnOffer) -> Option<Arc<TlsStep>> {
        if !address.is_tls() {
            return None;
        }
        Some(Arc::new(TlsStep {
            server_name: match address.host() {
                Host::Name(n) => n.clone(),
                Host::Ip(ip) => ip.to_string(),
            },
            alpn: offer.ids().to_vec(),
            config: 0,
            ech: None,
            ech_retry: false,
        }))
    }

    /// The TLS step for an endpoint's `tls_variant`.
    pub(super) fn tls_for(&self, variant: u16) -> Option<Arc<TlsStep>> {
        match variant {
            0 => self.tls.clone(),
            n => self
                .tls_steps()
                .get(usize::from(n) - 1)
                .cloned()
                .or_else(|| self.tls.clone()),
        }
    }

    /// Lets held attempt `i` go on to TLS with its endpoint's step as the answers now say
    /// (with ECH if its service has it), or cancels it if its endpoint is no longer listed:
    /// a pre-connection is used only if it is consistent with a record (RFC 9460 §5.1).
    pub(super) fn resume(&mut self, i: usize, now: Instant) {
        let target = self.attempts[i].plan.route.target;
        let Some(variant) = self
            .endpoints
            .iter()
            .find(|e| e.target == target && e.transport == self.attempts[i].plan.transport)
            .filter(|e| e.listed)
            .map(|e| e.tls_variant)
        else {
            self.cancel(i, CancelReason::Withdrawn, now);
            return;
        };
        let tls = self.tls_for(variant);
        let a = &mut self.attempts[i];
        if a.state.resume_tls().is_err() {
            return;
        }
        a.plan.tls = tls;
        a.plan.hold_tls = false;
        self.out.push_back(Output::ResumeAttempt { id: a.id });
    }

    /// Resumes every held attempt whose TCP handshake is done, once no HTTPS answer is
    /// awaited any more.
    pub(super) fn resume_held(&mut self, now: Instant) {
        if self.resolution.holds_tls() {
            return;
        }
        for i in 0..self.attempts.len() {
            if self.attempts[i].state == AttemptState::Held {
                self.resume(i, now);
            }
        }
    }
}
