//! Encrypted Client Hello (draft-ietf-tls-esni, with its configuration from HTTPS records as
//! draft-ietf-tls-svcb-ech says): the TLS configurations that encrypt the ClientHello, the
//! GREASE one, and the retry after a server rejects ECH.
//!
//! rustls does the cryptography (HPKE comes with the `aws-lc-rs` provider; the `ring` build
//! has none, so ECH is off there). A configuration with ECH can only be built from the parts
//! of one the connector made itself (provider and verifier), so a caller's own
//! `ClientConfig` turns ECH off too.

use std::sync::{Arc, Mutex};

use fastfallback_plan::TlsFailure;
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

/// What a failed handshake's `error` means to the follow-up rules
/// ([`fastfallback_plan::tls_follow_up`]), read from the first rustls error in its source
/// chain.
pub(crate) fn tls_failure(error: &AttemptError) -> TlsFailure {
    use rustls::AlertDescription as Alert;
    if let Some(retry) = rejection(error) {
        return TlsFailure::EchRejected(retry);
    }
    match rustls_cause(error) {
        Some(
            rustls::Error::AlertReceived(
                Alert::ProtocolVersion | Alert::HandshakeFailure | Alert::InsufficientSecurity,
            )
            | rustls::Error::PeerIncompatible(_),
        ) => TlsFailure::Incompatible,
        _ => TlsFailure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastfallback_plan::{ConnectPlan, TlsStep, tls_follow_up};
    use fastfallback_proto::{AttemptErrorKind, Phase};
    use fastfallback_route::Route;
    use rustls::internal::msgs::codec::{Codec, Reader};
    use rustls::internal::msgs::handshake::EchConfigPayload;

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
    fn a_rejection_reads_with_its_retry_configs_re_encoded_byte_for_byte() {
        let retry_list = fastfallback_testnet::ech_config_list("public.test");
        let failure = tls_failure(&rejected(Some(configs(&retry_list))));
        assert_eq!(
            failure,
            TlsFailure::EchRejected(Some(Arc::from(&retry_list[..])))
        );
        // Usable by rustls.
        #[cfg(feature = "aws-lc-rs")]
        assert!(EchConfig::new(EchConfigListBytes::from(&retry_list[..]), suites()).is_ok());
        // The rule in the plan crate takes it: one retry with the server's list.
        let step = TlsStep {
            server_name: "origin.test".into(),
            alpn: Vec::new(),
            config: 0,
            ech: Some(Arc::from(&b"the record's list"[..])),
            ech_retry: false,
        };
        let route = Route::direct("192.0.2.1:443".parse().unwrap());
        let first = ConnectPlan::new(route, Some(Arc::new(step)));
        let retry = tls_follow_up(&first, Phase::Tls, &failure, 0).expect("a retry");
        assert_eq!(
            retry.tls.as_deref().unwrap().ech.as_deref(),
            Some(&retry_list[..])
        );
    }

    #[test]
    fn a_rejection_without_retry_configs_and_other_errors_read_as_what_they_are() {
        assert_eq!(tls_failure(&rejected(None)), TlsFailure::EchRejected(None));
        assert_eq!(
            tls_failure(&rejected(Some(Vec::new()))),
            TlsFailure::EchRejected(None)
        );
        let alert = |a| {
            AttemptError::new(AttemptErrorKind::Tls, Phase::Tls, "alert")
                .with_source(rustls::Error::AlertReceived(a))
        };
        use rustls::AlertDescription as Alert;
        assert_eq!(
            tls_failure(&alert(Alert::HandshakeFailure)),
            TlsFailure::Incompatible
        );
        assert_eq!(
            tls_failure(&alert(Alert::ProtocolVersion)),
            TlsFailure::Incompatible
        );
        assert_eq!(
            tls_failure(&alert(Alert::BadCertificate)),
            TlsFailure::Other
        );
        let plain = AttemptError::new(AttemptErrorKind::Tls, Phase::Tls, "eof");
        assert_eq!(tls_failure(&plain), TlsFailure::Other);
    }
}
