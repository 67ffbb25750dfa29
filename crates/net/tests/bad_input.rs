//! The bad-input catalogue of design.md, case by case, through the public driver API: each
//! bad input gets the exact, clear error a user sees, and nothing is sent or left open.
//! (Loopback only; no root needed.)

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use fastfallback_net::{ConnectError, Connector, FallbackPolicy};
use fastfallback_proto::{AttemptErrorKind, DnsAnswer, DnsError, Phase, QueryKind, RaceErrorKind};
use fastfallback_testkit::loopback::{LOCALHOST, bind, closed_port, https_server, serve_each};
use fastfallback_testkit::resolver::FakeDns;
use fastfallback_testnet::TlsMaterial;

/// A resolver with `host` at 127.0.0.1 only: no AAAA and no HTTPS record.
fn localhost_only(host: &str) -> FakeDns {
    FakeDns::new()
        .addresses(host, QueryKind::A, [LOCALHOST])
        .addresses(host, QueryKind::Aaaa, [])
        .answer(host, QueryKind::Https, DnsAnswer::Https(Vec::new()))
}

fn connector(resolver: &FakeDns) -> Connector {
    Connector::builder()
        .resolver(resolver.clone())
        .policy(
            FallbackPolicy::builder()
                .connect_timeout(Duration::from_secs(2))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

/// The error of connecting to `origin` with no DNS at all, and the number of queries sent.
async fn rejected(origin: &str) -> (String, usize) {
    let dns = FakeDns::new();
    let Err(err) = connector(&dns).connect(origin).await else {
        panic!("{origin:?} must be rejected");
    };
    assert!(matches!(err, ConnectError::InvalidAddress(_)), "{err:?}");
    (err.to_string(), dns.asked())
}

#[tokio::test]
async fn malformed_names_are_rejected_before_any_query() {
    let long_label = format!("tcp://{}.example:80", "a".repeat(64));
    let long_name = format!("tcp://{}:80", ["abcdefghi"; 26].join("."));
    let cases = [
        ("tcp://:80", "invalid origin: host is empty"),
        (
            long_label.as_str(),
            "invalid origin: host name label \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" is 64 bytes long; the limit is 63",
        ),
        (
            long_name.as_str(),
            "invalid origin: host name is 259 bytes long; the limit is 253",
        ),
        (
            "tcp://exa mple.com:80",
            "invalid origin: host name contains invalid character ' '",
        ),
        (
            "tcp://exa\0mple.com:80",
            "invalid origin: host name contains invalid character '\\0'",
        ),
        (
            "tcp://a..b:80",
            "invalid origin: host name has an empty label",
        ),
        (
            "tcp://10.0.0.256:80",
            "invalid origin: host \"10.0.0.256\" ends in a number, so it can only be an IPv4 \
             address, and it is not one in dotted-decimal form (a.b.c.d, each 0-255)",
        ),
    ];
    for (origin, expected) in cases {
        let (error, asked) = rejected(origin).await;
        println!("{origin:?} → {error}");
        assert_eq!(error, expected, "{origin:?}");
        assert_eq!(asked, 0, "{origin:?}: no DNS query for a bad name");
    }
}

#[tokio::test]
async fn bad_ports_and_uris_are_rejected_before_any_query() {
    let cases = [
        (
            "tcp://example.com:0",
            "invalid origin: port 0 cannot be connected to",
        ),
        (
            "example.com:65536",
            "invalid origin: port \"65536\" is not a number in 1..=65535",
        ),
        ("https://", "invalid origin: URI has no host"),
        (
            "ftp://example.com",
            "invalid origin: scheme \"ftp\" is not supported (use http, https or tcp)",
        ),
        (
            "example.com",
            "invalid origin: port is missing (write host:port)",
        ),
    ];
    for (origin, expected) in cases {
        let (error, asked) = rejected(origin).await;
        println!("{origin:?} → {error}");
        assert_eq!(error, expected, "{origin:?}");
        assert_eq!(asked, 0);
    }
}

async fn race_error(dns: &[(&str, QueryKind, DnsAnswer)], origin: &str) -> (RaceErrorKind, String) {
    let dns: FakeDns = dns.iter().cloned().collect();
    match connector(&dns).connect(origin).await {
        Err(ConnectError::Race(f)) => (f.error.kind, f.error.to_string()),
        other => panic!(
            "expected a race failure, got {:?}",
            other.map(|c| c.peer_addr())
        ),
    }
}

#[tokio::test]
async fn nxdomain_servfail_and_empty_answers_fail_naming_each_query() {
    let (kind, text) = race_error(&[], "tcp://nowhere.test:80").await;
    assert_eq!(kind, RaceErrorKind::NoAddresses);
    assert_eq!(
        text,
        "no usable addresses; AAAA query: name does not exist (NXDOMAIN); A query: name does not exist (NXDOMAIN)"
    );
    let servfail = DnsAnswer::Error(DnsError::ServFail);
    let (_, text) = race_error(
        &[
            ("broken.test", QueryKind::Aaaa, servfail.clone()),
            ("broken.test", QueryKind::A, servfail),
        ],
        "tcp://broken.test:80",
    )
    .await;
    assert_eq!(
        text,
        "no usable addresses; AAAA query: server failure (SERVFAIL); A query: server failure (SERVFAIL)"
    );
    let empty = DnsAnswer::Addresses(Vec::new());
    let (_, text) = race_error(
        &[
            ("empty.test", QueryKind::Aaaa, empty.clone()),
            ("empty.test", QueryKind::A, empty),
        ],
        "tcp://empty.test:80",
    )
    .await;
    assert_eq!(
        text,
        "no usable addresses; AAAA query: no records; A query: no records"
    );
}

#[tokio::test]
async fn unusable_addresses_are_skipped_each_with_a_reason() {
    let aaaa: Vec<IpAddr> = ["::", "ff02::1", "fe80::1"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let a: Vec<IpAddr> = ["0.0.0.0", "224.0.0.1", "255.255.255.255"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let (kind, text) = race_error(
        &[
            ("bad.test", QueryKind::Aaaa, DnsAnswer::Addresses(aaaa)),
            ("bad.test", QueryKind::A, DnsAnswer::Addresses(a)),
        ],
        "tcp://bad.test:80",
    )
    .await;
    println!("{text}");
    assert_eq!(kind, RaceErrorKind::NoAddresses);
    for expected in [
        "skipped ::: unspecified address",
        "skipped ff02::1: multicast address",
        "skipped fe80::1: link-local address without a scope",
        "skipped 0.0.0.0: unspecified address",
        "skipped 224.0.0.1: multicast address",
        "skipped 255.255.255.255: broadcast address",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from: {text}");
    }
}

#[tokio::test]
async fn an_ipv4_mapped_aaaa_answer_is_used_as_ipv4() {
    let (_listener, port) = bind().await;
    let dns = FakeDns::new()
        .addresses(
            "mapped.test",
            QueryKind::Aaaa,
            ["::ffff:127.0.0.1".parse().unwrap()],
        )
        .addresses("mapped.test", QueryKind::A, []);
    let conn = connector(&dns)
        .connect(&format!("tcp://mapped.test:{port}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conn.peer_addr(), (Ipv4Addr::LOCALHOST, port).into());
}

#[tokio::test]
async fn an_oversized_answer_is_capped_and_says_so() {
    let (_listener, port) = bind().await;
    // 40 addresses; the cap is 32 per answer. The first is the one that listens.
    let many: Vec<IpAddr> = (1..=40)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
        .collect();
    let dns = FakeDns::new()
        .addresses("many.test", QueryKind::Aaaa, [])
        .addresses("many.test", QueryKind::A, many);
    let conn = connector(&dns)
        .connect(&format!("tcp://many.test:{port}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let report = conn.report();
    assert_eq!(
        report.attempts.len(),
        1,
        "the first address connects\n{report}"
    );
    // Where nothing listens, every admitted address is tried and refused, and the 8 past
    // the cap are named in the error, with the reason.
    let closed = closed_port();
    let many: Vec<IpAddr> = (1..=40)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
        .collect();
    let (kind, text) = race_error(
        &[
            (
                "refused.test",
                QueryKind::Aaaa,
                DnsAnswer::Addresses(Vec::new()),
            ),
            ("refused.test", QueryKind::A, DnsAnswer::Addresses(many)),
        ],
        &format!("tcp://refused.test:{closed}"),
    )
    .await;
    assert_eq!(kind, RaceErrorKind::AllAttemptsFailed);
    assert!(text.contains("(32 attempts:"), "{text}");
    for i in 33..=40 {
        assert!(
            text.contains(&format!("skipped 127.0.0.{i}: answer capped at 32")),
            "{text}"
        );
    }
}

#[test]
fn bad_policy_values_are_rejected_by_the_builder() {
    let cases: [(Result<FallbackPolicy, _>, &str); 4] = [
        (
            FallbackPolicy::builder()
                .attempt_delay(Duration::from_millis(5))
                .build(),
            "invalid fallback policy: attempt_delay: 5 ms is under the 10 ms floor of RFC 8305 §5",
        ),
        (
            FallbackPolicy::builder().max_concurrent_attempts(0).build(),
            "invalid fallback policy: max_concurrent_attempts: must be at least 1",
        ),
        (
            FallbackPolicy::builder().preferred_family_count(0).build(),
            "invalid fallback policy: preferred_family_count: must be at least 1 (RFC 8305 §4)",
        ),
        (
            FallbackPolicy::builder()
                .min_attempt_delay(Duration::from_millis(500))
                .max_attempt_delay(Duration::from_millis(100))
                .build(),
            "invalid fallback policy: max_attempt_delay: 100 ms is below min_attempt_delay (500 ms)",
        ),
    ];
    for (result, expected) in cases {
        let err = result.unwrap_err().to_string();
        println!("{err}");
        assert_eq!(err, expected);
    }
}

/// A TLS server on 127.0.0.1 with a leaf from `tls`, offering `alpn`.
async fn tls_server(tls: &TlsMaterial, alpn: &[&[u8]]) -> u16 {
    let alpn: Vec<Vec<u8>> = alpn.iter().map(|a| a.to_vec()).collect();
    https_server(tls.with_alpn(&alpn)).await.0
}

/// Which roots the client trusts.
enum Trust {
    /// The server's CA.
    ServersCa,
    /// Another CA with the same name (the server's chain does not verify against it).
    ImpostorCa,
    /// The webpki roots (the default), which know no test CA.
    Webpki,
}

async fn tls_error(tls: &TlsMaterial, trust: Trust, host: &str, alpn: &[&[u8]]) -> String {
    let port = tls_server(tls, alpn).await;
    let mut roots = rustls::RootCertStore::empty();
    match trust {
        Trust::ServersCa => roots.add(tls.ca_der()).unwrap(),
        Trust::ImpostorCa => roots
            .add(
                TlsMaterial::new(&["other.test".to_owned()], &[])
                    .unwrap()
                    .ca_der(),
            )
            .unwrap(),
        Trust::Webpki => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let dns = localhost_only(host);
    let connector = Connector::builder()
        .resolver(dns)
        .root_certificates(roots)
        .build()
        .unwrap();
    let Err(ConnectError::Race(f)) = connector.connect(&format!("https://{host}:{port}")).await
    else {
        panic!("the TLS handshake must fail");
    };
    let a = &f.error.attempts[0];
    assert_eq!(
        (a.error.kind, a.error.phase),
        (AttemptErrorKind::Tls, Phase::Tls)
    );
    assert_eq!(
        a.addr,
        (Ipv4Addr::LOCALHOST, port).into(),
        "the error names the route"
    );
    f.error.to_string().replace(&port.to_string(), "PORT")
}

#[tokio::test]
async fn tls_failures_name_the_attempt_the_route_and_what_went_wrong() {
    let tls = TlsMaterial::new(&["good.test".to_owned()], &[]).unwrap();
    let head = "every connection attempt failed; most telling: attempt #1 to 127.0.0.1:PORT: \
                tls handshake failed during tls: ";
    let cases = [
        (
            Trust::Webpki,
            "good.test",
            &[b"h2" as &[u8]],
            "invalid peer certificate: UnknownIssuer",
        ),
        (
            Trust::ImpostorCa,
            "good.test",
            &[b"h2"],
            "invalid peer certificate: BadSignature",
        ),
        (
            Trust::ServersCa,
            "bad.test",
            &[b"h2"],
            "invalid peer certificate: certificate not valid for name \"bad.test\"; certificate is only valid for DnsName(\"good.test\")",
        ),
        (
            Trust::ServersCa,
            "good.test",
            &[b"h3"],
            "received fatal alert: NoApplicationProtocol",
        ),
    ];
    for (trust, host, alpn, why) in cases {
        let text = tls_error(&tls, trust, host, alpn).await;
        println!("{text}");
        assert!(text.starts_with(&format!("{head}{why}")), "{text}");
    }
    let expired = TlsMaterial::expired(&["good.test".to_owned()]).unwrap();
    let text = tls_error(&expired, Trust::ServersCa, "good.test", &[b"h2"]).await;
    println!("{text}");
    assert!(
        text.starts_with(&format!(
            "{head}invalid peer certificate: certificate expired"
        )),
        "{text}"
    );
}

/// A TCP server on 127.0.0.1 that reads the ClientHello, then answers with `reply` (raw bytes)
/// and closes. Its port.
async fn raw_tls_server(reply: &'static [u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (listener, port) = bind().await;
    serve_each(listener, move |mut s| async move {
        let mut hello = [0u8; 2048];
        let _ = s.read(&mut hello).await;
        let _ = s.write_all(reply).await;
        let _ = s.shutdown().await;
    });
    port
}

/// What the race says when a TLS server answers the ClientHello with `reply`: the attempt's
/// error kind and detail.
async fn handshake_error(reply: &'static [u8]) -> (AttemptErrorKind, String) {
    let port = raw_tls_server(reply).await;
    let dns = localhost_only("raw.test");
    let Err(ConnectError::Race(f)) = connector(&dns)
        .connect(&format!("https://raw.test:{port}"))
        .await
    else {
        panic!("the handshake must fail");
    };
    let a = &f.error.attempts[0];
    assert_eq!(a.error.phase, Phase::Tls, "{}", f.error);
    (a.error.kind, a.error.detail.clone())
}

#[tokio::test]
async fn tls_alerts_and_broken_handshakes_each_name_what_the_server_did() {
    // A TLS alert record: content type 21, TLS 1.2 record version, length 2, level fatal (2),
    // then the description (RFC 8446 §6).
    use AttemptErrorKind::{Reset, Tls};
    let cases: [(&'static [u8], AttemptErrorKind, &str); 5] = [
        (
            &[21, 3, 3, 0, 2, 2, 40],
            Tls,
            "received fatal alert: HandshakeFailure",
        ),
        (
            &[21, 3, 3, 0, 2, 2, 70],
            Tls,
            "received fatal alert: ProtocolVersion",
        ),
        (
            &[21, 3, 3, 0, 2, 2, 112],
            Tls,
            "received fatal alert: UnrecognisedName",
        ),
        // Not TLS at all (a plain HTTP server on the port).
        (
            b"HTTP/1.1 400 Bad Request\r\n\r\n",
            Tls,
            "received corrupt message of type InvalidContentType",
        ),
        // The server closes after the ClientHello.
        (b"", Reset, "handshake: tls handshake eof"),
    ];
    for (reply, kind, expected) in cases {
        let (got_kind, detail) = handshake_error(reply).await;
        assert_eq!(
            (got_kind, detail.as_str()),
            (kind, expected),
            "reply {reply:?}"
        );
    }
}

#[tokio::test]
async fn a_server_requiring_a_client_certificate_fails_the_last_handshake_step_with_its_alert() {
    // The other steps are above: alerts in answer to the ClientHello, the server's
    // certificate refused by us, no common ALPN; this one comes after our Finished.
    let tls = TlsMaterial::new(&["good.test".to_owned()], &[]).unwrap();
    let (port, _) = https_server(tls.requiring_client_certificates(&[b"h2".to_vec()])).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    let dns = localhost_only("good.test");
    let connector = Connector::builder()
        .resolver(dns)
        .root_certificates(roots)
        .build()
        .unwrap();
    // TLS 1.3 finishes the client's side before the server's verdict on the (missing)
    // certificate arrives: the connect may succeed, and the first read then gets the alert.
    match connector
        .connect(&format!("https://good.test:{port}"))
        .await
    {
        Err(ConnectError::Race(f)) => {
            let detail = &f.error.attempts[0].error.detail;
            assert_eq!(
                detail, "received fatal alert: CertificateRequired",
                "{}",
                f.error
            );
        }
        Ok(conn) => {
            use tokio::io::AsyncReadExt;
            let (mut stream, _) = conn.into_parts();
            let mut buf = [0u8; 16];
            let err = stream.read(&mut buf).await.unwrap_err();
            assert_eq!(err.to_string(), "received fatal alert: CertificateRequired");
        }
        Err(other) => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_huge_answer_keeps_the_error_and_the_report_small() {
    // 100 000 A records, all on loopback where nothing listens: 32 are tried and refused,
    // the rest skipped past the cap. Before, the error named every one (4.3 MB) and the report
    // listed every address.
    let closed = closed_port();
    let many: Vec<IpAddr> = (0..100_000u32)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0x7f00_0000 | (i + 1))))
        .collect();
    let dns = FakeDns::new()
        .addresses("huge.test", QueryKind::Aaaa, [])
        .addresses("huge.test", QueryKind::A, many);
    let Err(ConnectError::Race(failure)) = connector(&dns)
        .connect(&format!("tcp://huge.test:{closed}"))
        .await
    else {
        panic!("every address is refused");
    };
    let text = ConnectError::Race(failure.clone()).to_string();
    assert!(text.len() < 8 * 1024, "{} bytes: {text}", text.len());
    assert!(text.contains("(32 attempts:"), "{text}");
    assert!(
        text.contains(" and 16 more)"),
        "attempts past 16 are counted: {text}"
    );
    assert_eq!(failure.error.skipped.len(), 16);
    assert_eq!(failure.error.skipped_more, 100_000 - 32 - 16);
    assert!(
        text.ends_with(&format!("; and {} more skipped", 100_000 - 32 - 16)),
        "{text}"
    );
    let report = &failure.report;
    let a = report
        .queries
        .iter()
        .find(|q| q.kind == QueryKind::A)
        .unwrap();
    let Some(fastfallback_net::AnswerReport::Addresses(listed)) = &a.answer else {
        panic!("{a:?}");
    };
    assert_eq!(listed.len(), fastfallback_net::MAX_RECORDS_LISTED);
    assert_eq!(a.unlisted, 100_000 - fastfallback_net::MAX_RECORDS_LISTED);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["queries"][1]["unlisted"], 100_000 - 16);
    assert_eq!(
        json["queries"][1]["answer"]["addresses"]
            .as_array()
            .unwrap()
            .len(),
        16
    );
    let (json_len, shown_len) = (report.to_json().len(), report.to_string().len());
    assert!(json_len < 64 * 1024, "{json_len} bytes of JSON");
    assert!(shown_len < 32 * 1024, "{shown_len} bytes of text");
    assert!(
        report
            .to_string()
            .contains(&format!("and {} more", 100_000 - 16))
    );
}

#[tokio::test]
async fn the_report_shows_what_the_network_chose_with_its_control_characters_escaped() {
    let closed = closed_port();
    // An ALPN id that would set the window title and clear the screen.
    let evil = fastfallback_proto::Alpn::Other(b"h2\x1b]0;owned\x07\x1b[2J".to_vec());
    let https = fastfallback_proto::HttpsRecord {
        priority: 1,
        target: String::new(),
        alpn: vec![evil, fastfallback_proto::Alpn::H2],
        ..Default::default()
    };
    let dns = localhost_only("evil.test").answer(
        "evil.test",
        QueryKind::Https,
        DnsAnswer::Https(vec![https]),
    );
    let Err(err) = connector(&dns)
        .connect(&format!("https://evil.test:{closed}"))
        .await
    else {
        panic!("nothing listens");
    };
    let shown = err.report().unwrap().to_string();
    assert!(
        !shown.contains('\x1b') && !shown.contains('\x07'),
        "{shown:?}"
    );
    assert!(
        shown.contains("alpn=h2\\x1b]0;owned\\x07\\x1b[2J,h2"),
        "{shown}"
    );
}
