//! The plans that follow a failed TLS handshake, as pure functions of the failed plan and what
//! the handshake's failure means: the next TLS configuration, or the one retry after a server
//! rejected Encrypted Client Hello. A driver reads a [`TlsFailure`] from its TLS library's
//! error and hands the plan [`tls_follow_up`] gives back to the race
//! (`AttemptEvent::Failed { follow_up, .. }`); the rules themselves are here, once.

use std::sync::Arc;

use fastfallback_proto::Phase;

use crate::{ConnectPlan, TlsStep};

/// What a failed TLS handshake says, as far as the follow-up rules go. The driver reads it
/// from its TLS library's error (for rustls: the first `rustls::Error` in the error's source
/// chain).
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum TlsFailure {
    /// The server rejected ECH (draft-ietf-tls-esni §6.1.6), with the ECHConfigList of retry
    /// configurations it sent, if it sent a non-empty one. A rejection is also a kind of
    /// [`TlsFailure::Incompatible`]: the peer could not take what the ClientHello offered.
    EchRejected(Option<Arc<[u8]>>),
    /// The server could not take what this TLS configuration offers: it sent a
    /// `protocol_version`, `handshake_failure` or `insufficient_security` alert (RFC 8446
    /// §6.2), or the TLS library found the peer incompatible. Another configuration may do.
    Incompatible,
    /// Anything else: no other configuration would fix it.
    Other,
}

impl ConnectPlan {
    /// The plan that follows this one with TLS step `tls`: the same route, transport and
    /// tunnel, one
    /// follow-up further, TLS not held (a follow-up starts after the HTTPS answer that
    /// decided its step). Every follow-up of a failed handshake is built here.
    pub fn follow_up_with(&self, tls: TlsStep) -> Self {
        Self {
            route: self.route.clone(),
            transport: self.transport,
            tunnel: self.tunnel,
            tls: Some(Arc::new(tls)),
            hold_tls: false,
            attempt: self.attempt + 1,
            without_svcb: self.without_svcb,
        }
    }
}

/// The plan to run after `plan` failed in `phase` with `failure`, if a rule calls for one:
/// [`next_tls_config`] first, else [`ech_retry`]. `fallbacks` is how many TLS configurations
/// the client has after its first.
pub fn tls_follow_up(
    plan: &ConnectPlan,
    phase: Phase,
    failure: &TlsFailure,
    fallbacks: usize,
) -> Option<ConnectPlan> {
    // QUIC carries TLS 1.3 alone (RFC 9001 §4.2) and no ECH here: the fallback
    // configurations (older TLS versions) and ECH retries are for TCP.
    if plan.transport == fastfallback_proto::TransportKind::Quic {
        return None;
    }
    next_tls_config(plan, phase, failure, fallbacks).or_else(|| ech_retry(plan, failure))
}

/// The same route with the client's next TLS configuration (of `fallbacks` after the first),
/// when the handshake failed because the server could not take this one. Never for a plan
/// with ECH: the client must not fall back to a configuration that could lack it
/// (draft-ietf-tls-esni §6.1.6, "Disabling fallback"); a rejection has its own retry.
pub fn next_tls_config(
    plan: &ConnectPlan,
    phase: Phase,
    failure: &TlsFailure,
    fallbacks: usize,
) -> Option<ConnectPlan> {
    let step = plan.tls.as_ref()?;
    if phase != Phase::Tls || step.config >= fallbacks || step.ech.is_some() {
        return None;
    }
    let fixable = matches!(
        failure,
        TlsFailure::Incompatible | TlsFailure::EchRejected(_)
    );
    fixable.then(|| {
        plan.follow_up_with(TlsStep {
            config: step.config + 1,
            ..(**step).clone()
        })
    })
}

/// The one retry after a server rejected ECH with retry configurations: the same route, the
/// server's configurations (draft-ietf-tls-esni §6.1.6). Never a second retry, never a
/// fallback without ECH, and nothing for a rejection without retry configurations.
pub fn ech_retry(plan: &ConnectPlan, failure: &TlsFailure) -> Option<ConnectPlan> {
    let step = plan.tls.as_ref()?;
    if step.ech.is_none() || step.ech_retry {
        return None;
    }
    let TlsFailure::EchRejected(Some(retry)) = failure else {
        return None;
    };
    Some(plan.follow_up_with(TlsStep {
        ech: Some(Arc::clone(retry)),
        ech_retry: true,
        ..(**step).clone()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastfallback_route::Route;

    fn plan(ech: Option<&[u8]>, config: usize) -> ConnectPlan {
        let step = TlsStep {
            server_name: "origin.test".into(),
            alpn: Vec::new(),
            config,
            ech: ech.map(Arc::from),
            ech_retry: false,
        };
        let route = Route::direct("192.0.2.1:443".parse().unwrap());
        ConnectPlan::new(route, Some(Arc::new(step)))
    }

    fn rejected(retry: Option<&[u8]>) -> TlsFailure {
        TlsFailure::EchRejected(retry.map(Arc::from))
    }

    #[test]
    fn a_rejection_with_retry_configs_is_retried_once_on_the_same_route_with_them() {
        let first = plan(Some(b"the record's list"), 0);
        let failure = rejected(Some(b"the server's list"));
        let retry = tls_follow_up(&first, Phase::Tls, &failure, 0).expect("a retry");
        assert_eq!(retry.route, first.route);
        assert_eq!(retry.attempt, 1);
        assert!(!retry.hold_tls);
        let step = retry.tls.as_deref().unwrap();
        assert!(step.ech_retry);
        assert_eq!(step.ech.as_deref(), Some(&b"the server's list"[..]));
        assert_eq!(step.config, 0, "the same configuration");
        // Never a second retry.
        assert_eq!(tls_follow_up(&retry, Phase::Tls, &failure, 0), None);
    }

    #[test]
    fn a_rejection_without_retry_configs_or_without_ech_is_not_retried() {
        let with_ech = plan(Some(b"list"), 0);
        assert_eq!(ech_retry(&with_ech, &rejected(None)), None);
        assert_eq!(ech_retry(&plan(None, 0), &rejected(Some(b"list"))), None);
        assert_eq!(ech_retry(&with_ech, &TlsFailure::Incompatible), None);
        // With ECH, no fallback to another configuration either.
        assert_eq!(
            tls_follow_up(&with_ech, Phase::Tls, &TlsFailure::Incompatible, 2),
            None
        );
    }

    #[test]
    fn an_incompatible_server_gets_the_next_configuration_until_there_is_none() {
        let first = plan(None, 0);
        let next = tls_follow_up(&first, Phase::Tls, &TlsFailure::Incompatible, 2).unwrap();
        assert_eq!(next.tls.as_deref().unwrap().config, 1);
        assert_eq!((next.attempt, next.route.clone()), (1, first.route.clone()));
        let last = tls_follow_up(&next, Phase::Tls, &TlsFailure::Incompatible, 2).unwrap();
        assert_eq!(last.tls.as_deref().unwrap().config, 2);
        assert_eq!(last.attempt, 2);
        assert_eq!(
            tls_follow_up(&last, Phase::Tls, &TlsFailure::Incompatible, 2),
            None
        );
        // A rejection of ECH is an incompatibility too (a GREASE ClientHello has no ECH).
        assert!(next_tls_config(&first, Phase::Tls, &rejected(None), 1).is_some());
    }

    #[test]
    fn a_failed_quic_handshake_gets_no_other_configuration_and_no_ech_retry() {
        // RFC 9001 §4.2: QUIC carries TLS 1.3 alone, so the fallback configurations (older
        // TLS versions) cannot help it.
        let mut quic = plan(None, 0);
        quic.transport = fastfallback_proto::TransportKind::Quic;
        assert!(tls_follow_up(&plan(None, 0), Phase::Tls, &TlsFailure::Incompatible, 2).is_some());
        assert_eq!(
            tls_follow_up(&quic, Phase::Tls, &TlsFailure::Incompatible, 2),
            None
        );
        let mut with_ech = plan(Some(b"list"), 0);
        with_ech.transport = fastfallback_proto::TransportKind::Quic;
        assert_eq!(
            tls_follow_up(&with_ech, Phase::Tls, &rejected(Some(b"retry")), 0),
            None
        );
    }

    #[test]
    fn only_a_tls_failure_that_another_configuration_could_fix_moves_on() {
        let first = plan(None, 0);
        assert_eq!(
            tls_follow_up(&first, Phase::Tls, &TlsFailure::Other, 2),
            None
        );
        assert_eq!(
            tls_follow_up(&first, Phase::Tcp, &TlsFailure::Incompatible, 2),
            None
        );
        let plain = ConnectPlan::new(first.route, None);
        assert_eq!(
            tls_follow_up(&plain, Phase::Tls, &TlsFailure::Incompatible, 2),
            None
        );
    }
}
