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

    /// A quinn server configuration presenting the leaf with ALPN ids `alpn`. With
    /// `early_data` it accepts 0-RTT: resumption tickets allow early data
    /// (`max_early_data_size` is `u32::MAX`, the only value QUIC allows besides 0, RFC 9001
    /// §4.6.1); without, it rejects it.
    pub fn quic_server(
        &self,
        alpn: &[Vec<u8>],
        early_data: bool,
    ) -> Result<quinn::ServerConfig, String> {
        let mut config = ServerConfig::clone(&self.server_config);
        config.alpn_protocols = alpn.to_vec();
        config.max_early_data_size = if early_data { u32::MAX } else { 0 };
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(config))
            .map_err(|e| e.to_string())?;
        Ok(quinn::ServerConfig::with_crypto(Arc::new(crypto)))
    }
}

/// An ECHConfigList (draft-ietf-tls-esni §4) with one configuration for `public_name`: a
/// fresh X25519 key, HKDF-SHA256 with AES-128-GCM, and no extensions. In wire form, as the
/// `ech` SvcParam carries it. No server here can decrypt with it (rustls has no ECH server),
/// so a client that offers it sees the server reject ECH.
pub fn ech_config_list(public_name: &str) -> Vec<u8> {
    use rustls::crypto::aws_lc_rs::hpke::DH_KEM_X25519_HKDF_SHA256_AES_128 as SUITE;
    use rustls::crypto::hpke::Hpke;
    let (public, _private) = SUITE.generate_key_pair().expect("an X25519 key pair");
    let u16_len = |n: usize| u16::try_from(n).expect("short").to_be_bytes();
    let mut contents = vec![7u8]; // config_id
    contents.extend(0x0020u16.to_be_bytes()); // KEM: DHKEM(X25519, HKDF-SHA256)
    contents.extend(u16_len(public.0.len()));
    contents.extend(&public.0);
    contents.extend(u16_len(4)); // one cipher suite
    contents.extend(0x0001u16.to_be_bytes()); // KDF: HKDF-SHA256
    contents.extend(0x0001u16.to_be_bytes()); // AEAD: AES-128-GCM
    contents.push(0); // maximum_name_length
    contents.push(u8::try_from(public_name.len()).expect("a short public name"));
    contents.extend(public_name.as_bytes());
    contents.extend(u16_len(0)); // no extensions
    let mut config = 0xfe0du16.to_be_bytes().to_vec(); // version
    config.extend(u16_len(contents.len()));
    config.extend(contents);
    let mut list = u16_len(config.len()).to_vec();
    list.extend(config);
    list
}
