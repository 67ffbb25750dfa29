//! Encrypted Client Hello (draft-ietf-tls-esni, with its configuration from HTTPS records as
//! draft-ietf-tls-svcb-ech says): the TLS configurations that encrypt the ClientHello, the
//! GREASE one, and the retry after a server rejects ECH.
//!
//! rustls does the cryptography (HPKE comes with the `aws-lc-rs` provider; the `ring` build
//! has none, so ECH is off there). A configuration with ECH can only be built from the parts
//! of one the connector made itself (provider and verifier), so a caller's own
//! `ClientConfig` turns ECH off too.

use std::sync::{Arc, Mutex};

use fastfallback_plan::{ConnectPlan, TlsStep};
use fastfallback_proto::AttemptError;
use rustls::client::danger::ServerCertVerifier;
use rustls::client::{EchConfig, EchGreaseConfig, EchMode};
use rustls::crypto::CryptoProvider;
use rustls::crypto::hpke::Hpke;
use rustls::pki_types::EchConfigListBytes;
use rustls::{ClientConfig, PeerIncompatible};

/// An ECHConfigList and the TLS configuration built for it.
type Built = (Arc<[u8]>, Arc<ClientConfig>);

/// What the connector needs to build ECH configurations.
pub(crate) struct Ech {
    provider: Arc<CryptoProvider>,
    verifier: Arc<dyn ServerCertVerifier>,
    alpn: Vec<Vec<u8>>,
    /// Offered when an attempt has no ECH configuration, if the caller asked for GREASE.
    grease: Option<Arc<ClientConfig>>,
    /// The last configuration built, for the next attempt with the same ECHConfigList (most
    /// races use one, and every attempt of the race shares it).
    last: Mutex<Option<Built>>,
}

/// The HPKE suites rustls can use for ECH with the built-in provider.
fn suites() -> &'static [&'static dyn Hpke] {
    #[cfg(feature = "aws-lc-rs")]
    {
        rustls::crypto::aws_lc_rs::hpke::ALL_SUPPORTED_SUITES
    }
    #[cfg(not(feature = "aws-lc-rs"))]
    {
        &[]
    }
}

impl Ech {
    /// ECH support for a connector whose TLS configuration was built from `provider` and
    /// `verifier`, offering `alpn`; `None` when the build has no HPKE.
    pub(crate) fn new(
        provider: Arc<CryptoProvider>,
        verifier: Arc<dyn ServerCertVerifier>,
        alpn: Vec<Vec<u8>>,
        grease: bool,
    ) -> Result<Option<Self>, rustls::Error> {
        let Some(&suite) = suites().first() else {
            return Ok(None);
        };
        let mut ech = Self {
            provider,
            verifier,
            alpn,
            grease: None,
            last: Mutex::new(None),
        };
        if grease {
            // draft-ietf-tls-esni §6.2: a GREASE extension looks like a real one, with a
            // placeholder key of the right shape.
            let (public, _) = suite.generate_key_pair()?;
            let mode = EchMode::from(EchGreaseConfig::new(suite, public));
            ech.grease = Some(ech.build(mode)?);
        }
        Ok(Some(ech))
    }

    fn build(&self, mode: EchMode) -> Result<Arc<ClientConfig>, rustls::Error> {
        let mut config = ClientConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_ech(mode)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::clone(&self.verifier))
            .with_no_client_auth();
        config.alpn_protocols.clone_from(&self.alpn);
        Ok(Arc::new(config))
    }

    /// The configuration for an attempt that encrypts its ClientHello with `list`, or why
    /// none of the list's configurations can be used.
    pub(crate) fn config(&self, list: &Arc<[u8]>) -> Result<Arc<ClientConfig>, rustls::Error> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((bytes, config)) = &*last
            && bytes == list
        {
            return Ok(Arc::clone(config));
        }
        let ech = EchConfig::new(EchConfigListBytes::from(&list[..]), suites())?;
        let config = self.build(EchMode::from(ech))?;
        *last = Some((Arc::clone(list), Arc::clone(&config)));
        Ok(config)
    }

    /// The GREASE configuration, if the caller asked for it.
    pub(crate) fn grease(&self) -> Option<&Arc<ClientConfig>> {
        self.grease.as_ref()
    }
}

/// The rustls error inside `error`, if it has one.
fn rustls_cause(error: &AttemptError) -> Option<&rustls::Error> {
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        cause = e.source();
    }
    None
}

/// Whether `error` is a server's rejection of ECH, and the retry configurations it sent, if
/// any (draft-ietf-tls-esni §6.1.6).
pub(crate) fn rejection(error: &AttemptError) -> Option<Option<Arc<[u8]>>> {
    match rustls_cause(error)? {
        rustls::Error::PeerIncompatible(PeerIncompatible::ServerRejectedEncryptedClientHello(
            retry,
        )) => Some(retry.as_ref().and_then(|configs| {
            use rustls::internal::msgs::codec::Codec;
            (!configs.is_empty()).then(|| configs.get_encoding().into())
        })),
        _ => None,
    }
}

/// What to say about `tls` when it is a rejection of ECH, in place of rustls' debug form.
pub(crate) fn describe_rejection(tls: &rustls::Error) -> Option<&'static str> {
    match tls {
        rustls::Error::PeerIncompatible(PeerIncompatible::ServerRejectedEncryptedClientHello(
            retry,
        )) => Some(match retry {
            Some(c) if !c.is_empty() => {
                "the server rejected Encrypted Client Hello and sent retry configurations"
            }
            _ => "the server rejected Encrypted Client Hello and sent no retry configurations",
        }),
        _ => None,
    }
}

/// The one retry after a server rejected ECH with retry configurations: the same route, the
/// server's configurations (draft-ietf-tls-esni §6.1.6). Never a second retry, and never a
/// fallback without ECH.
pub(crate) fn follow_up(plan: &ConnectPlan, error: &AttemptError) -> Option<ConnectPlan> {
    let step = plan.tls.as_ref()?;
    if step.ech.is_none() || step.ech_retry {
        return None;
    }
    let retry = rejection(error)??;
    Some(ConnectPlan {
        route: plan.route.clone(),
        tunnel: plan.tunnel,
        tls: Some(Arc::new(TlsStep {
            ech: Some(retry),
            ech_retry: true,
            ..(**step).clone()
        })),
        hold_tls: false,
        attempt: plan.attempt + 1,
        without_svcb: plan.without_svcb,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastfallback_proto::{AttemptErrorKind, Phase};
    use fastfallback_route::Route;
    use rustls::internal::msgs::codec::{Codec, Reader};
    use rustls::internal::msgs::handshake::EchConfigPayload;

    fn plan(ech: Option<Arc<[u8]>>) -> ConnectPlan {
        let step = TlsStep {
            server_name: "origin.test".into(),
            alpn: Vec::new(),
            config: 0,
            ech,
            ech_retry: false,
        };
        let route = Route::direct("192.0.2.1:443".parse().unwrap());
        ConnectPlan::new(route, Some(Arc::new(step)))
    }

    fn rejected(retry: Option<Vec<EchConfigPayload>>) -> AttemptError {
        let e = rustls::Error::PeerIncompatible(
            PeerIncompatible::ServerRejectedEncryptedClientHello(retry),
        );
        AttemptError::new(AttemptErrorKind::Tls, Phase::Tls, "rejected").with_source(e)
    }

    fn configs(list: &[u8]) -> Vec<EchConfigPayload> {
        Vec::<EchConfigPayload>::read(&mut Reader::init(list)).unwrap()
    }

    #[test]
    fn a_rejection_with_retry_configs_is_retried_once_on_the_same_route_with_them() {
        let retry_list = fastfallback_testnet::ech_config_list("public.test");
        let first = plan(Some(Arc::from(&b"the record's list"[..])));
        let retry = follow_up(&first, &rejected(Some(configs(&retry_list)))).expect("a retry");
        assert_eq!(retry.route, first.route);
        assert_eq!(retry.attempt, 1);
        let step = retry.tls.as_deref().unwrap();
        assert!(step.ech_retry);
        // Re-encoded byte for byte, and usable by rustls.
        assert_eq!(step.ech.as_deref(), Some(&retry_list[..]));
        #[cfg(feature = "aws-lc-rs")]
        assert!(EchConfig::new(EchConfigListBytes::from(&retry_list[..]), suites()).is_ok());
        // Never a second retry.
        let again = rejected(Some(configs(&retry_list)));
        assert!(follow_up(&retry, &again).is_none());
    }

    #[test]
    fn a_rejection_without_retry_configs_or_without_ech_is_not_retried() {
        let with_ech = plan(Some(Arc::from(&b"list"[..])));
        assert!(follow_up(&with_ech, &rejected(None)).is_none());
        assert!(follow_up(&with_ech, &rejected(Some(Vec::new()))).is_none());
        let list = fastfallback_testnet::ech_config_list("public.test");
        assert!(follow_up(&plan(None), &rejected(Some(configs(&list)))).is_none());
        let other = AttemptError::new(AttemptErrorKind::Tls, Phase::Tls, "alert").with_source(
            rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure),
        );
        assert!(follow_up(&with_ech, &other).is_none());
    }
}
