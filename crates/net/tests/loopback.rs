//! The driver against real sockets on loopback: no root and no test network needed.
//!
//! The origin `origin.test` is pinned to `::1` and `127.0.0.1` with a [`StaticResolver`], and
//! servers listen on the same port of one or both addresses. Connectivity is set to dual stack,
//! so the tests do not depend on whether the machine itself has global IPv6.

use fastfallback_testkit::Millis;
use fastfallback_testkit::loopback::{accept_and_hold, serve_each};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use fastfallback_net::{
    BuildError, ConnectError, Connectivity, Connector, FallbackPolicy, StaticResolver,
};
use fastfallback_proto::{Alpn, AlpnOffer, AttemptErrorKind, Phase, RaceErrorKind};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

const V6: &str = "::1";
const V4: &str = "127.0.0.1";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pinned() -> StaticResolver {
    StaticResolver::new().with("origin.test", [ip(V6), ip(V4)])
}

/// A port that is free on both loopback addresses, with listeners on the ones asked for. The
/// others stay closed, so the kernel refuses them.
async fn listen(on: &[&str]) -> (u16, Vec<TcpListener>) {
    let open: Vec<IpAddr> = on.iter().map(|h| ip(h)).collect();
    let closed: Vec<IpAddr> = [V6, V4]
        .iter()
        .filter(|h| !on.contains(h))
        .map(|h| ip(h))
        .collect();
    fastfallback_testkit::loopback::listen_on_one_port(&open, &closed).await
}

fn accept_forever(listeners: Vec<TcpListener>) {
    listeners.into_iter().for_each(accept_and_hold);
}

fn connector(resolver: StaticResolver) -> Connector {
    Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(resolver)
        // Seeds 0..6 never make a race ignore history, so memory tests are repeatable.
        .rng_seed(0)
        .build()
        .unwrap()
}

#[tokio::test]
async fn healthy_dual_stack_loopback_wins_with_one_ipv6_attempt() {
    let (port, listeners) = listen(&[V6, V4]).await;
    accept_forever(listeners);
    let conn = connector(pinned())
        .connect(&format!("tcp://origin.test:{port}"))
        .await
        .unwrap();
    let report = conn.report();
    assert_eq!(report.attempts_started(), 1, "{report}");
    assert_eq!(report.winner, Some(report.attempts[0].id));
    assert_eq!(conn.peer_addr(), SocketAddr::new(ip(V6), port));
    assert_eq!(
        conn.stream().tcp().unwrap().peer_addr().unwrap(),
        conn.peer_addr()
    );
    assert!(
        conn.stream().tcp().unwrap().nodelay().unwrap(),
        "TCP_NODELAY is on by default"
    );
}

#[tokio::test]
async fn refused_ipv6_moves_to_ipv4_without_waiting_for_the_attempt_delay() {
    let (port, listeners) = listen(&[V4]).await;
    accept_forever(listeners);
    let conn = connector(pinned())
        .connect(&format!("origin.test:{port}"))
        .await
        .unwrap();
    let report = conn.report();
    assert_eq!(report.attempts_started(), 2, "{report}");
    assert!(
        report.attempts[0]
            .outcome
            .to_string()
            .starts_with("failed: connection refused"),
        "{report}"
    );
    assert_eq!(report.attempts[1].route, SocketAddr::new(ip(V4), port));
    // Reference profile P4: the refusal of the latest attempt starts the next one in the same
    // turn, at the same instant, not after 250 ms and not after a 10 ms floor.
    let second = report.attempts[1].started;
    assert_eq!(
        Some(second),
        report.attempts[0].ended,
        "second attempt at {second:?}\n{report}"
    );
    assert_eq!(report.winner, Some(report.attempts[1].id));
}

#[tokio::test]
async fn every_attempt_refused_reports_each_cause_in_start_order() {
    let (port, _none) = listen(&[]).await;
    let err = connector(pinned())
        .connect(&format!("origin.test:{port}"))
        .await
        .unwrap_err();
    let race = err.race_error().expect("a race ran");
    assert_eq!(race.kind, RaceErrorKind::AllAttemptsFailed);
    let addrs: Vec<SocketAddr> = race.attempts.iter().map(|a| a.addr).collect();
    assert_eq!(
        addrs,
        [SocketAddr::new(ip(V6), port), SocketAddr::new(ip(V4), port)]
    );
    assert!(
        race.attempts
            .iter()
            .all(|a| a.error.kind == AttemptErrorKind::Refused)
    );
    let report = err.report().unwrap();
    assert_eq!(report.winner, None);
    let error = report.error.as_ref().unwrap();
    assert_eq!(error.kind, RaceErrorKind::AllAttemptsFailed, "typed");
    assert!(error.message.contains("every connection attempt failed"));
    let io: std::io::Error = err.into();
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
}

/// A refused attempt reads "connection refused during tcp: connect: ECONNREFUSED": the errno
/// by the name connect(2) gives it, not "os error 111".
#[tokio::test]
async fn a_refused_attempt_names_its_errno_not_its_number() {
    let (port, _none) = listen(&[]).await;
    let err = connector(pinned())
        .connect(&format!("127.0.0.1:{port}"))
        .await
        .unwrap_err();
    let race = err.race_error().expect("a race ran");
    assert_eq!(
        race.attempts[0].error.to_string(),
        "connection refused during tcp: connect: ECONNREFUSED"
    );
    assert!(!err.to_string().contains("os error"), "{err}");
}

#[tokio::test]
async fn unknown_name_fails_with_the_dns_errors_and_no_attempt() {
    let err = connector(pinned())
        .connect("nothere.test:80")
        .await
        .unwrap_err();
    let race = err.race_error().unwrap();
    assert_eq!(race.kind, RaceErrorKind::NoAddresses);
    assert!(race.attempts.is_empty());
    assert_eq!(race.dns.len(), 2, "{race:?}");
}

#[tokio::test]
async fn invalid_origins_are_rejected_before_any_io() {
    let c = connector(pinned());
    for bad in [
        "https://",
        "tcp://origin.test:0",
        "ftp://origin.test",
        "bad host:80",
        "",
    ] {
        match c.connect(bad).await {
            Err(ConnectError::InvalidAddress(_)) => {}
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_ip_literal_needs_no_dns() {
    let (port, listeners) = listen(&[V4]).await;
    accept_forever(listeners);
    let conn = connector(StaticResolver::new())
        .connect(&format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    assert!(conn.report().queries.is_empty());
    assert_eq!(conn.report().attempts_started(), 1);
}

#[tokio::test]
async fn a_real_connect_is_remembered_for_exactly_the_winning_route() {
    let (port, listeners) = listen(&[V6, V4]).await;
    accept_forever(listeners);
    let c = connector(pinned());
    let conn = c.connect(&format!("origin.test:{port}")).await.unwrap();
    let db = c.route_database().expect("route memory is on by default");
    assert_eq!(conn.report().attempts_started(), 1);
    // The connector's connectivity is set by hand, so its network is NetworkId(0).
    let net = fastfallback_route::NetworkId(0);
    assert_eq!(db.len(net), 1, "exactly the winner's route is remembered");
    assert_eq!(c.network().id, net);
    drop(conn);
}

// ---- TLS ----

struct Pki {
    roots: RootCertStore,
    /// The CA certificate as PEM, as a user's CA file holds it.
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn pki(names: &[&str], alpn: &[&[u8]]) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let sans: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    let leaf = CertificateParams::new(sans)
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca_cert.der().clone()).unwrap();
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(leaf.der().to_vec())],
        PrivateKeyDer::from(key),
    )
    .unwrap();
    server.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Pki {
        roots,
        ca_pem: ca_cert.pem(),
        server: Arc::new(server),
    }
}

/// A connector for `origin.test` that trusts only `roots`.
fn tls_connector(roots: RootCertStore) -> Connector {
    Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(pinned())
        .root_certificates(roots)
        .build()
        .unwrap()
}

fn serve_tls(listeners: Vec<TcpListener>, config: Arc<rustls::ServerConfig>) {
    for l in listeners {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&config));
        serve_each(l, move |s| {
            let acceptor = acceptor.clone();
            async move {
                if let Ok(mut tls) = acceptor.accept(s).await {
                    let mut buf = [0u8; 64];
                    while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
                }
            }
        });
    }
}

#[tokio::test]
async fn tls_race_verifies_the_origin_and_negotiates_h2() {
    let pki = pki(&["origin.test"], &[b"h2", b"http/1.1"]);
    let (port, listeners) = listen(&[V6, V4]).await;
    serve_tls(listeners, pki.server);
    let c = tls_connector(pki.roots);
    let conn = c
        .connect(&format!("https://origin.test:{port}"))
        .await
        .unwrap();
    assert_eq!(conn.alpn().map(ToString::to_string).as_deref(), Some("h2"));
    assert_eq!(conn.report().alpn, Some(Alpn::H2));
    let tls = conn.stream().tls().expect("a TLS stream");
    assert!(tls.peer_certificates().is_some_and(|c| !c.is_empty()));
    let won = conn.report().winning_attempt().unwrap();
    assert!(won.tcp_connected.unwrap().ms() <= won.ended.unwrap().ms());
    assert!(
        won.plan.contains("tls origin.test [h2, http/1.1]"),
        "{}",
        won.plan
    );
}

/// A connector for `origin.test` built by `build` from a builder with the pinned resolver.
fn pem_connector(
    build: impl FnOnce(
        fastfallback_net::ConnectorBuilder,
    ) -> Result<fastfallback_net::ConnectorBuilder, BuildError>,
) -> Connector {
    let builder = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(pinned());
    build(builder).unwrap().build().unwrap()
}

#[tokio::test]
async fn a_ca_given_as_pem_bytes_or_a_pem_file_is_trusted() {
    let pki = pki(&["origin.test"], &[b"http/1.1"]);
    let (port, listeners) = listen(&[V6, V4]).await;
    serve_tls(listeners, pki.server);
    let origin = format!("https://origin.test:{port}");

    // Without the CA, the webpki roots alone do not trust the server.
    let plain = pem_connector(Ok);
    let err = plain.connect(&origin).await.unwrap_err();
    let kinds: Vec<_> = err
        .race_error()
        .unwrap()
        .attempts
        .iter()
        .map(|a| a.error.kind)
        .collect();
    assert!(
        kinds.iter().all(|k| *k == AttemptErrorKind::Tls),
        "{kinds:?}"
    );

    // A bundle: the CA after an unrelated section (a key), which is skipped.
    let bundle = format!(
        "{}{}",
        KeyPair::generate().unwrap().serialize_pem(),
        pki.ca_pem
    );
    let from_bytes = pem_connector(|b| b.add_root_pem(bundle.as_bytes()));
    from_bytes.connect(&origin).await.unwrap();

    let file = std::env::temp_dir().join(format!("fastfallback-ca-{}.pem", std::process::id()));
    std::fs::write(&file, &pki.ca_pem).unwrap();
    let from_file = pem_connector(|b| b.add_root_pem_file(&file));
    std::fs::remove_file(&file).unwrap();
    from_file.connect(&origin).await.unwrap();
}

#[test]
fn pem_input_without_a_usable_certificate_is_a_build_error() {
    let key_only = KeyPair::generate().unwrap().serialize_pem();
    let torn = "-----BEGIN CERTIFICATE-----\nAAAA\n";
    for bad in ["", "not pem at all", key_only.as_str(), torn] {
        let result = Connector::builder().add_root_pem(bad.as_bytes());
        assert!(
            matches!(result, Err(BuildError::Tls(_))),
            "{bad:?}: {:?}",
            result.map(|_| ())
        );
    }
    let missing = Connector::builder().add_root_pem_file("/nonexistent/ca.pem");
    let message = missing.map(|_| ()).unwrap_err().to_string();
    assert!(message.contains("/nonexistent/ca.pem"), "{message}");
}

#[tokio::test]
async fn certificate_for_another_name_fails_every_route_with_a_tls_error() {
    let pki = pki(&["other.test"], &[b"http/1.1"]);
    let (port, listeners) = listen(&[V6, V4]).await;
    serve_tls(listeners, pki.server);
    let c = tls_connector(pki.roots);
    let err = c
        .connect(&format!("https://origin.test:{port}"))
        .await
        .unwrap_err();
    let race = err.race_error().unwrap();
    assert_eq!(race.attempts.len(), 2, "{err}");
    for a in &race.attempts {
        assert_eq!(
            (a.error.kind, a.error.phase),
            (AttemptErrorKind::Tls, Phase::Tls),
            "{a:?}"
        );
        assert!(
            a.error.detail.to_lowercase().contains("certificate"),
            "{}",
            a.error.detail
        );
    }
    let msg = err.to_string();
    assert!(
        msg.contains("origin.test") && msg.contains("certificate"),
        "{msg}"
    );
}

/// A TLS server on 127.0.0.1 and a connector that trusts another CA (`origin.test` resolves
/// to the server): every TLS attempt fails verification.
async fn untrusted_server() -> (u16, Connector) {
    let pki_server = pki(&["origin.test"], &[b"h2"]);
    let other_ca = pki(&["origin.test"], &[b"h2"]);
    let (port, listeners) = listen(&[V4]).await;
    serve_tls(listeners, pki_server.server);
    let c = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(StaticResolver::new().with("origin.test", [ip(V4)]))
        .root_certificates(other_ca.roots)
        .build()
        .unwrap();
    (port, c)
}

#[tokio::test]
async fn an_untrusted_server_fails_with_a_tls_error() {
    let (port, c) = untrusted_server().await;
    let err = c
        .connect(&format!("https://origin.test:{port}"))
        .await
        .unwrap_err();
    let primary = err.race_error().unwrap().primary().unwrap();
    assert_eq!(primary.error.kind, AttemptErrorKind::Tls);
    assert_eq!(primary.addr, SocketAddr::new(ip(V4), port));
}

#[tokio::test]
async fn a_refused_route_is_tried_last_on_the_second_contact() {
    let (port, listeners) = listen(&[V4]).await;
    accept_forever(listeners);
    let c = connector(pinned());
    let origin = format!("origin.test:{port}");
    let first = c.connect(&origin).await.unwrap();
    assert_eq!(first.report().attempts_started(), 2);
    let second = c.connect(&origin).await.unwrap();
    let report = second.report();
    assert_eq!(
        report.attempts_started(),
        1,
        "the postponed IPv6 route goes last\n{report}"
    );
    assert_eq!(second.peer_addr(), SocketAddr::new(ip(V4), port));
}

#[tokio::test]
async fn okhttp_mode_wins_at_tcp_and_finishes_tls_alone() {
    let pki = pki(&["origin.test"], &[b"http/1.1"]);
    let (port, listeners) = listen(&[V6, V4]).await;
    serve_tls(listeners, pki.server);
    let policy = FallbackPolicy::builder()
        .win_at(fastfallback_plan::WinAt::Tcp)
        .build()
        .unwrap();
    let c = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .policy(policy)
        .resolver(pinned())
        .root_certificates(pki.roots)
        .build()
        .unwrap();
    let conn = c
        .connect(&format!("https://origin.test:{port}"))
        .await
        .unwrap();
    assert_eq!(
        conn.alpn().map(ToString::to_string).as_deref(),
        Some("http/1.1")
    );
    assert_eq!(conn.report().attempts_started(), 1);
    assert!(conn.stream().tls().is_some());
}

#[tokio::test]
async fn a_bad_policy_is_rejected_by_the_builder() {
    let mut policy = FallbackPolicy::default();
    policy.attempt_delay = std::time::Duration::from_millis(5);
    let err = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .policy(policy)
        .resolver(pinned())
        .build()
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid policy"), "{err}");
}

#[tokio::test]
async fn the_local_address_option_chooses_the_source_address() {
    let (port, mut listeners) = listen(&[V4]).await;
    let listener = listeners.pop().unwrap();
    let options =
        fastfallback_net::SocketOptions::default().local_v4(Some("127.0.0.2".parse().unwrap()));
    let c = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(pinned())
        .socket_options(options)
        .build()
        .unwrap();
    let conn = c.connect(&format!("127.0.0.1:{port}")).await.unwrap();
    let (_, from) = listener.accept().await.unwrap();
    assert_eq!(from.ip(), ip("127.0.0.2"));
    assert_eq!(
        conn.stream().tcp().unwrap().local_addr().unwrap().ip(),
        ip("127.0.0.2")
    );
}

#[tokio::test]
async fn the_interface_option_binds_every_attempt_to_that_device() {
    let (port, listeners) = listen(&[V4]).await;
    accept_forever(listeners);
    let c = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(pinned())
        .socket_options(fastfallback_net::SocketOptions::default().interface(Some("lo".into())))
        .build()
        .unwrap();
    let conn = c.connect(&format!("127.0.0.1:{port}")).await.unwrap();
    let sock = socket2::SockRef::from(conn.stream().tcp().unwrap());
    assert_eq!(sock.device().unwrap().as_deref(), Some(&b"lo"[..]));
    // A device that does not exist fails the attempt with a clear error, not a panic.
    let c = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(pinned())
        .socket_options(
            fastfallback_net::SocketOptions::default().interface(Some("nosuchdev0".into())),
        )
        .build()
        .unwrap();
    let err = c.connect(&format!("127.0.0.1:{port}")).await.unwrap_err();
    let primary = err.race_error().unwrap().primary().unwrap();
    assert!(
        primary.error.detail.contains("socket setup"),
        "{}",
        primary.error
    );
}

// ---- route memory in a file ----

/// A path in the temp directory for one test, removed when dropped.
struct TempPath(std::path::PathBuf);

impl TempPath {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("fastfallback-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir.join("routes.bin"))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn with_memory_file(path: &std::path::Path) -> Connector {
    Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(pinned())
        .memory_file(path)
        .policy(
            FallbackPolicy::builder()
                .route_memory(fastfallback_route::RouteMemory {
                    // This test is about what is remembered, not about exploration.
                    explore_one_in: 0,
                    ..Default::default()
                })
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn route_memory_outlives_the_connector_through_its_file() {
    let file = TempPath::new("outlives");
    let (port, listeners) = listen(&[V4]).await;
    accept_forever(listeners);
    let origin = format!("origin.test:{port}");
    {
        let first = with_memory_file(&file.0);
        let report = first.connect(&origin).await.unwrap().into_parts().1;
        assert_eq!(
            report.attempts_started(),
            2,
            "::1 refused, then 127.0.0.1\n{report}"
        );
        // Dropping the last clone saves the file.
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file.0).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "route memory is private to its user");
    }
    // A fresh connector, as in a new process: it loads the file and skips the refused route.
    let second = with_memory_file(&file.0);
    let report = second.connect(&origin).await.unwrap().into_parts().1;
    assert_eq!(report.attempts_started(), 1, "{report}");
    assert_eq!(report.attempts[0].route, SocketAddr::new(ip(V4), port));
}

#[tokio::test]
async fn a_corrupt_memory_file_is_ignored_and_replaced() {
    let file = TempPath::new("corrupt");
    std::fs::write(&file.0, b"FFRM\x01 this is not what the writer wrote").unwrap();
    let (port, listeners) = listen(&[V4]).await;
    accept_forever(listeners);
    {
        let c = with_memory_file(&file.0);
        let report = c
            .connect(&format!("origin.test:{port}"))
            .await
            .unwrap()
            .into_parts()
            .1;
        assert_eq!(report.attempts_started(), 2);
        c.save_memory().unwrap();
    }
    // The file is valid again and holds what the race learned.
    let bytes = std::fs::read(&file.0).unwrap();
    let db = fastfallback_route::RouteDatabase::new(Default::default());
    // A race clock a minute past its epoch: entries up to a minute old fit (on a loaded
    // machine the race may have learned more than a millisecond before the save).
    db.decode_into(&bytes, fastfallback_proto::Instant::from_millis(60_000), 0)
        .expect("the replaced file decodes");
    assert!(!db.is_empty());
}

// ---- what never shows ----

#[tokio::test]
async fn userinfo_never_appears_in_errors_reports_or_json() {
    let (port, listeners) = listen(&[]).await;
    drop(listeners);
    let c = connector(pinned());
    let err = c
        .connect(&format!("tcp://alice:hunter2@origin.test:{port}"))
        .await
        .unwrap_err();
    let report = err.report().unwrap();
    for text in [
        err.to_string(),
        format!("{err:?}"),
        report.to_string(),
        report.to_json(),
    ] {
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("alice"), "{text}");
    }
    assert_eq!(report.origin, format!("tcp://origin.test:{port}"));
}

#[tokio::test]
async fn localhost_connects_without_dns_and_without_global_connectivity() {
    let (port, listeners) = listen(&[V4]).await;
    accept_forever(listeners);
    // No resolver entry for localhost, and no connectivity at all: RFC 6761 §6.3 still gives
    // the loopback addresses, and loopback is reachable.
    let c = Connector::builder()
        .connectivity(Connectivity {
            v6: false,
            v4: false,
            nat64: None,
        })
        .resolver(StaticResolver::new())
        .build()
        .unwrap();
    let conn = c.connect(&format!("localhost:{port}")).await.unwrap();
    let report = conn.report();
    assert!(report.queries.is_empty(), "{report}");
    assert_eq!(conn.peer_addr(), SocketAddr::new(ip(V4), port));
    let conn = c.connect(&format!("127.0.0.1:{port}")).await.unwrap();
    assert_eq!(conn.peer_addr(), SocketAddr::new(ip(V4), port));
}

#[tokio::test]
async fn a_zone_naming_no_interface_is_a_clear_error_before_any_io() {
    let err = connector(pinned())
        .connect("tcp://[fe80::1%25nosuchif0]:80")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid origin: zone \"nosuchif0\": this host has no such interface"
    );
}

#[tokio::test]
async fn an_http1_only_policy_offers_only_http11_in_alpn() {
    let pki = pki(&["origin.test"], &[b"h2", b"http/1.1"]);
    let (port, listeners) = listen(&[V4]).await;
    serve_tls(listeners, pki.server);
    let policy = FallbackPolicy::builder()
        .alpn(AlpnOffer::Http11Only)
        .build()
        .unwrap();
    let c = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .policy(policy)
        .resolver(pinned())
        .root_certificates(pki.roots)
        .build()
        .unwrap();
    let conn = c
        .connect(&format!("https://origin.test:{port}"))
        .await
        .unwrap();
    assert_eq!(
        conn.alpn(),
        Some(&Alpn::Http11),
        "the h2-first server could not pick h2"
    );
    let won = conn.report().winning_attempt().unwrap();
    assert!(won.plan.contains("[http/1.1]"), "{}", won.plan);
}

#[tokio::test]
async fn a_tls_configs_own_alpn_is_what_attempts_offer() {
    let pki = pki(&["origin.test"], &[b"h2", b"http/1.1"]);
    let (port, listeners) = listen(&[V4]).await;
    serve_tls(listeners, pki.server);
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(pki.roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let c = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(pinned())
        .tls_config(config)
        .build()
        .unwrap();
    let conn = c
        .connect(&format!("https://origin.test:{port}"))
        .await
        .unwrap();
    assert_eq!(conn.alpn(), Some(&Alpn::Http11), "not overwritten with h2");
}

#[test]
fn alpn_settings_that_cannot_be_met_are_build_errors() {
    let config = |ids: &[&[u8]]| {
        let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
        c.alpn_protocols = ids.iter().map(|id| id.to_vec()).collect();
        c
    };
    let h2_only = FallbackPolicy::builder()
        .alpn(AlpnOffer::Http2Only)
        .build()
        .unwrap();
    let conflict = Connector::builder()
        .resolver(pinned())
        .policy(h2_only)
        .tls_config(config(&[b"http/1.1"]))
        .build()
        .unwrap_err();
    assert!(matches!(conflict, BuildError::Alpn(_)), "{conflict}");
    let unknown = Connector::builder()
        .resolver(pinned())
        .tls_config(config(&[b"h3"]))
        .build()
        .unwrap_err();
    assert!(unknown.to_string().contains("h3"), "{unknown}");
}

/// Walks an error's `source()` chain looking for an `E`.
fn find_in_chain<'a, E: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

#[tokio::test]
async fn a_connect_error_leads_down_to_rustls_and_io_errors_to_match_on() {
    let (port, c) = untrusted_server().await;
    let err = c
        .connect(&format!("https://origin.test:{port}"))
        .await
        .unwrap_err();
    let tls = find_in_chain::<rustls::Error>(&err).expect("the rustls error is in the chain");
    // Both test CAs have the same (empty) name, so rustls finds an issuer by name whose
    // signature does not match: a certificate error a caller can match on.
    assert!(
        matches!(tls, rustls::Error::InvalidCertificate(_)),
        "{tls:?}"
    );

    // A refused connect keeps the OS error: its kind, and the io::Error itself.
    let (closed, _listeners) = listen(&[]).await;
    let err = c
        .connect(&format!("tcp://127.0.0.1:{closed}"))
        .await
        .unwrap_err();
    let attempt = &err.race_error().unwrap().primary().unwrap().error;
    assert_eq!(
        attempt.io_kind(),
        Some(std::io::ErrorKind::ConnectionRefused)
    );
    let io = find_in_chain::<std::io::Error>(&err).expect("the io::Error is in the chain");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(io.raw_os_error().is_some());
}
