//! TLS configuration fallback (OkHttp's connection specs, "attempted in sequence until the
//! TLS handshake succeeds"), on loopback: a version the server refuses moves on to the next
//! configuration on the same route; a certificate error does not.

use std::sync::Arc;

use fastfallback_net::{ConnectError, Connector, StaticResolver};
use fastfallback_proto::AttemptErrorKind;
use fastfallback_testkit::loopback::{LOCALHOST, https_server};
use fastfallback_testnet::TlsMaterial;
use rustls::{ClientConfig, RootCertStore};

/// A TLS-1.2-only HTTPS server for `tls.test` on 127.0.0.1; its port.
async fn tls12_server(tls: &TlsMaterial) -> u16 {
    let config = tls.tls12_only(&[b"h2".to_vec(), b"http/1.1".to_vec()]);
    https_server(config).await.0
}

fn config(
    roots: &RootCertStore,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> ClientConfig {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth()
}

fn connector(roots: &RootCertStore) -> Connector {
    Connector::builder()
        .resolver(StaticResolver::new().with("tls.test", [LOCALHOST]))
        // First TLS 1.3 only, then TLS 1.3 and 1.2.
        .tls_config(config(roots, &[&rustls::version::TLS13]))
        .tls_fallback(config(
            roots,
            &[&rustls::version::TLS13, &rustls::version::TLS12],
        ))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_refused_protocol_version_falls_back_to_the_next_configuration_on_the_same_route() {
    let tls = TlsMaterial::new(&["tls.test".to_owned()], &[]).unwrap();
    let port = tls12_server(&tls).await;
    let mut roots = RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    let conn = connector(&roots)
        .connect(&format!("https://tls.test:{port}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let report = conn.report();
    assert_eq!(report.attempts.len(), 2, "{report}");
    let (first, second) = (&report.attempts[0], &report.attempts[1]);
    assert_eq!(
        first.route, second.route,
        "the same route, another configuration"
    );
    assert_eq!((first.tls_config, second.tls_config), (Some(0), Some(1)));
    assert!(
        first.outcome.to_string().contains("ProtocolVersion"),
        "{report}"
    );
    assert!(second.outcome.is_won(), "{report}");
    assert!(
        second.plan.ends_with("with TLS configuration #2"),
        "{}",
        second.plan
    );
    // The follow-up starts the instant the first fails (it is the next plan, ahead of all).
    assert_eq!(Some(second.started), first.ended, "{report}");
    let (stream, _) = conn.into_parts();
    let tls_version = stream.tls().and_then(|t| t.protocol_version());
    assert_eq!(tls_version, Some(rustls::ProtocolVersion::TLSv1_2));
}

#[tokio::test]
async fn a_certificate_error_does_not_fall_back() {
    let tls = TlsMaterial::new(&["tls.test".to_owned()], &[]).unwrap();
    let port = tls12_server(&tls).await;
    // A root store without the server's CA: the fallback (which would speak TLS 1.2) could
    // get past the version, but the certificate is what failed and no configuration fixes it.
    let other = TlsMaterial::new(&["other.test".to_owned()], &[]).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(other.ca_der()).unwrap();
    let c = Connector::builder()
        .resolver(StaticResolver::new().with("tls.test", [LOCALHOST]))
        .tls_config(config(
            &roots,
            &[&rustls::version::TLS13, &rustls::version::TLS12],
        ))
        .tls_fallback(config(&roots, &[&rustls::version::TLS12]))
        .build()
        .unwrap();
    let Err(ConnectError::Race(failure)) = c.connect(&format!("https://tls.test:{port}")).await
    else {
        panic!("an untrusted certificate must fail");
    };
    assert_eq!(failure.error.attempts.len(), 1, "{}", failure.report);
    assert_eq!(failure.error.attempts[0].error.kind, AttemptErrorKind::Tls);
    assert!(
        failure.error.attempts[0]
            .error
            .detail
            .contains("invalid peer certificate"),
        "{}",
        failure.error
    );
}
