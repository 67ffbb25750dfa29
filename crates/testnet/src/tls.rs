//! TLS material made for each test network: a fresh CA and one leaf certificate for every
//! server address, and the rustls server configuration built from them.
//!
//! The rustls configuration names its crypto provider (aws-lc-rs) explicitly instead of
//! installing a process-wide default, so it cannot clash with whatever the code under test
//! installs.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A CA made at run time and a leaf it signed: the certificate a client trusts and the
/// rustls server configuration that presents the leaf. Test networks make one per network;
/// loopback tests can make their own.
///
/// ```
/// let tls = fastfallback_testnet::TlsMaterial::new(&["h2.test".to_owned()], &[]).unwrap();
/// let config = tls.with_alpn(&[b"h2".to_vec()]);
/// assert_eq!(config.alpn_protocols, [b"h2".to_vec()]);
/// assert!(!tls.ca_der().is_empty());
/// ```
#[derive(Debug)]
pub struct TlsMaterial {
    pub(crate) ca_der: CertificateDer<'static>,
    /// The leaf, then the CA; and the leaf's key (for configurations made later).
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// Without ALPN; each TLS server clones it and sets its own ALPN ids.
    pub(crate) server_config: Arc<ServerConfig>,
}

impl TlsMaterial {
    /// A new CA, and a leaf signed by it for the DNS names `names` and the IP addresses
    /// `ips`.
    pub fn new(names: &[String], ips: &[IpAddr]) -> Result<Self, String> {
        Self::build(names, ips, false)
    }

    /// [`Self::new`], with a leaf that expired in 2021 (valid 2020-01-01 to 2021-01-01).
    pub fn expired(names: &[String]) -> Result<Self, String> {
        Self::build(names, &[], true)
    }

    fn build(names: &[String], ips: &[IpAddr], expired: bool) -> Result<Self, String> {
        fn err(what: &'static str) -> impl Fn(rcgen::Error) -> String {
            move |e| format!("{what}: {e}")
        }

        let ca_key = KeyPair::generate().map_err(err("CA key"))?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err("CA params"))?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "fastfallback testnet CA");
        let ca_cert = ca.self_signed(&ca_key).map_err(err("CA certificate"))?;
        let issuer = Issuer::new(ca, ca_key);

        let sans: Vec<String> = names
            .iter()
            .cloned()
            .chain(ips.iter().map(IpAddr::to_string))
            .collect();
        let leaf_key = KeyPair::generate().map_err(err("leaf key"))?;
        let mut leaf = CertificateParams::new(sans).map_err(err("leaf names"))?;
        if expired {
            leaf.not_before = rcgen::date_time_ymd(2020, 1, 1);
            leaf.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        leaf.distinguished_name.push(
            DnType::CommonName,
            names.first().map_or("testnet server", String::as_str),
        );
        let leaf_cert = leaf
            .signed_by(&leaf_key, &issuer)
            .map_err(err("leaf certificate"))?;

        let key = PrivateKeyDer::from(leaf_key);
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let server_config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("rustls versions: {e}"))?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf_cert.der().clone(), ca_cert.der().clone()],
                key.clone_key(),
            )
            .map_err(|e| format!("rustls server certificate: {e}"))?;
        Ok(Self {
            ca_der: ca_cert.der().clone(),
            chain: vec![leaf_cert.der().clone(), ca_cert.der().clone()],
            key,
            server_config: Arc::new(server_config),
        })
    }

    /// A server configuration with these ALPN ids that speaks only TLS 1.2 (a server a
    /// TLS-1.3-only client cannot talk to).
    pub fn tls12_only(&self, alpn: &[Vec<u8>]) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS12])
            .and_then(|b| {
                b.with_no_client_auth()
                    .with_single_cert(self.chain.clone(), self.key.clone_key())
            })
            .unwrap_or_else(|e| panic!("a TLS 1.2 server configuration: {e}"));
        config.alpn_protocols = alpn.to_vec();
        Arc::new(config)
    }

    /// A server configuration with these ALPN ids that requires a client certificate signed
    /// by this CA: a client without one fails after its Finished message (TLS 1.3
    /// `certificate_required`, RFC 8446 §4.4.2.4), the last step of the handshake.
    pub fn requiring_client_certificates(&self, alpn: &[Vec<u8>]) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca_der.clone())
            .unwrap_or_else(|e| panic!("the test CA as a client root: {e}"));
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::clone(&provider),
        )
        .build()
        .unwrap_or_else(|e| panic!("a client verifier: {e}"));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_client_cert_verifier(verifier)
                    .with_single_cert(self.chain.clone(), self.key.clone_key())
            })
            .unwrap_or_else(|e| panic!("a client-auth server configuration: {e}"));
        config.alpn_protocols = alpn.to_vec();
        Arc::new(config)
    }

    /// The CA certificate, for a client's root store.
    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.ca_der.clone()
    }

    /// The server configuration with these ALPN ids.
    pub fn with_alpn(&self, alpn: &[Vec<u8>]) -> Arc<ServerConfig> {
        let mut config = ServerConfig::clone(&self.server_config);
        config.alpn_protocols = alpn.to_vec();
        Arc::new(config)
    }
}
