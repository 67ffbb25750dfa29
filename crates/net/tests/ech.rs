//! Encrypted Client Hello from HTTPS records (draft-ietf-tls-esni, draft-ietf-tls-svcb-ech),
//! on loopback against rustls servers. rustls has no ECH server, so these servers reject ECH
//! the way any server without ECH does: they answer the outer ClientHello, whose SNI is the
//! configuration's public name. What that lets us check: the configuration is taken from the
//! record and used, the origin's name never goes out in clear, a rejection is reported and
//! never falls back to a connection without ECH, and GREASE is sent when asked for. (Acceptance
//! and the retry with a server's retry configurations need an ECH server; the retry plan is
//! unit-tested in `src/ech.rs`.)

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastfallback_net::{Connector, FallbackPolicy, Stream};
use fastfallback_proto::{Alpn, DnsAnswer, HttpsRecord, QueryKind};
use fastfallback_testkit::loopback::serve_each;
use fastfallback_testkit::resolver::FakeDns;
use fastfallback_testnet::{TlsMaterial, ech_config_list};
use rustls::client::EchStatus;
use tokio::net::TcpListener;

const ORIGIN: &str = "ech.test";
const PUBLIC: &str = "public.test";

/// A TLS server on `ip` for both names, recording the SNI of every ClientHello it reads.
async fn server(tls: &TlsMaterial, ip: Ipv4Addr) -> (SocketAddr, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = tls.with_alpn(&[b"h2".to_vec()]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    serve_each(listener, move |tcp| {
        let (config, log) = (Arc::clone(&config), Arc::clone(&log));
        async move {
            let acceptor =
                tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
            let Ok(start) = acceptor.await else { return };
            let sni = start.client_hello().server_name().map(str::to_owned);
            log.lock().unwrap().push(sni);
            if let Ok(mut tls) = start.into_stream(config).await {
                use tokio::io::AsyncReadExt;
                let mut buf = [0u8; 64];
                while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
            }
        }
    });
    (addr, seen)
}

fn material() -> TlsMaterial {
    TlsMaterial::new(&[ORIGIN.to_owned(), PUBLIC.to_owned()], &[]).unwrap()
}

fn record(port: u16, hint: Ipv4Addr, ech: Option<Vec<u8>>) -> HttpsRecord {
    HttpsRecord {
        priority: 1,
        target: target_of(hint),
        alpn: vec![Alpn::H2],
        port: Some(port),
        ipv4hint: vec![hint],
        ech: ech.map(Into::into),
        ..Default::default()
    }
}

fn connector(tls: &TlsMaterial, dns: FakeDns, grease: bool) -> Connector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    Connector::builder()
        .resolver(dns)
        .root_certificates(roots)
        .ech_grease(grease)
        .policy(
            FallbackPolicy::builder()
                .connect_timeout(Duration::from_secs(3))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

/// Each service has a TargetName of its own, whose A answer is its hint.
fn target_of(hint: Ipv4Addr) -> String {
    format!("svc{}.{ORIGIN}", hint.octets()[3])
}

fn dns(records: Vec<HttpsRecord>, a: &[Ipv4Addr]) -> FakeDns {
    let mut dns = FakeDns::new();
    for r in &records {
        let own = r.ipv4hint.iter().map(|v| IpAddr::V4(*v));
        dns = dns
            .addresses(&r.target, QueryKind::A, own)
            .addresses(&r.target, QueryKind::Aaaa, []);
    }
    dns.answer(ORIGIN, QueryKind::Https, DnsAnswer::Https(records))
        .addresses(ORIGIN, QueryKind::A, a.iter().map(|v| IpAddr::V4(*v)))
        .addresses(ORIGIN, QueryKind::Aaaa, [])
}

#[tokio::test]
async fn every_service_with_ech_rejected_fails_without_a_fallback_and_never_shows_the_origin_name()
{
    // T42 (E-01) as far as a server without ECH allows: both services carry `ech`, so the
    // client is SVCB-reliant. Both servers reject ECH; the race fails with that reason, no
    // attempt goes without ECH, and every ClientHello names the public name, not the origin.
    let tls = material();
    let (a, seen_a) = server(&tls, Ipv4Addr::new(127, 0, 0, 1)).await;
    let (b, seen_b) = server(&tls, Ipv4Addr::new(127, 0, 0, 2)).await;
    let list = ech_config_list(PUBLIC);
    let mut second = record(b.port(), Ipv4Addr::new(127, 0, 0, 2), Some(list.clone()));
    second.priority = 2;
    let records = vec![
        record(a.port(), Ipv4Addr::new(127, 0, 0, 1), Some(list)),
        second,
    ];
    // The origin's own A answer (no "." record covers it) points at a server that would accept
    // a plain handshake.
    let (plain, seen_plain) = server(&tls, Ipv4Addr::new(127, 0, 0, 3)).await;
    let c = connector(&tls, dns(records, &[Ipv4Addr::new(127, 0, 0, 3)]), false);
    let err = c
        .connect(&format!("https://{ORIGIN}:{}", plain.port()))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("rejected Encrypted Client Hello and sent no retry configurations"),
        "{text}"
    );
    let report = err.report().expect("a race ran");
    let plans: Vec<&str> = report.attempts.iter().map(|a| a.plan.as_str()).collect();
    assert_eq!(plans.len(), 2, "{report}");
    assert!(plans.iter().all(|p| p.ends_with("with ECH")), "{report}");
    assert_eq!(report.attempts[0].route, a, "{report}");
    assert_eq!(report.attempts[1].route, b, "{report}");
    for seen in [&seen_a, &seen_b] {
        assert_eq!(*seen.lock().unwrap(), [Some(PUBLIC.to_owned())]);
    }
    assert!(
        seen_plain.lock().unwrap().is_empty(),
        "no fallback without ECH"
    );
}

#[tokio::test]
async fn a_record_set_with_one_service_without_ech_keeps_its_fallback() {
    // Not every service carries `ech`: the client is not SVCB-reliant, so after the ECH
    // service is rejected the plain one is used, and it names the origin.
    let tls = material();
    let (a, _) = server(&tls, Ipv4Addr::new(127, 0, 0, 1)).await;
    let (b, seen_b) = server(&tls, Ipv4Addr::new(127, 0, 0, 2)).await;
    let mut plain = record(b.port(), Ipv4Addr::new(127, 0, 0, 2), None);
    plain.priority = 2;
    let records = vec![
        record(
            a.port(),
            Ipv4Addr::new(127, 0, 0, 1),
            Some(ech_config_list(PUBLIC)),
        ),
        plain,
    ];
    let c = connector(&tls, dns(records, &[]), false);
    let conn = c.connect(&format!("https://{ORIGIN}")).await.unwrap();
    assert_eq!(conn.peer_addr(), b);
    let report = conn.report();
    assert!(report.attempts[0].plan.ends_with("with ECH"), "{report}");
    assert_eq!(*seen_b.lock().unwrap(), [Some(ORIGIN.to_owned())]);
}

fn ech_status(stream: &Stream) -> Option<EchStatus> {
    stream.tls().map(|tls| tls.ech_status())
}

#[tokio::test]
async fn grease_is_sent_only_when_asked_for_and_the_handshake_still_succeeds() {
    let tls = material();
    let (a, seen) = server(&tls, Ipv4Addr::new(127, 0, 0, 1)).await;
    let records = vec![record(a.port(), Ipv4Addr::new(127, 0, 0, 1), None)];
    for (grease, expected) in [(true, EchStatus::Grease), (false, EchStatus::NotOffered)] {
        let c = connector(&tls, dns(records.clone(), &[]), grease);
        let conn = c.connect(&format!("https://{ORIGIN}")).await.unwrap();
        assert_eq!(conn.alpn(), Some(&Alpn::H2));
        assert_eq!(
            ech_status(conn.stream()),
            Some(expected),
            "grease: {grease}"
        );
    }
    // GREASE is not encryption: the origin's name is in the (only) ClientHello.
    assert_eq!(
        *seen.lock().unwrap(),
        [Some(ORIGIN.to_owned()), Some(ORIGIN.to_owned())]
    );
}
