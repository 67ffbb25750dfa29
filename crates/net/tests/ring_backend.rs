//! The driver built with rustls's ring backend instead of aws-lc-rs (features
//! `--no-default-features --features ring`; CI runs it so). With no process-wide provider
//! installed, the connector uses the backend it was built with, and a TLS race completes.
#![cfg(all(feature = "ring", not(feature = "aws-lc-rs")))]

use fastfallback_net::Connector;
use fastfallback_proto::Alpn;
use fastfallback_testkit::loopback::https_server;
use fastfallback_testnet::TlsMaterial;

#[tokio::test]
async fn a_connector_built_with_ring_completes_a_tls_race() {
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_none(),
        "no process-wide provider: the connector must pick its own backend"
    );
    let tls = TlsMaterial::new(&[], &[std::net::Ipv4Addr::LOCALHOST.into()]).unwrap();
    let (port, _stats) = https_server(tls.with_alpn(&[b"h2".to_vec()])).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    let connector = Connector::builder()
        .root_certificates(roots)
        .build()
        .unwrap();
    let conn = connector
        .connect(&format!("https://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conn.alpn(), Some(&Alpn::H2), "{}", conn.report());
}
