//! Behaviour of the test network through real kernel sockets: delay, blackhole, reset, ICMP,
//! stall, the SYN log, DNS, TLS, socket listing, sysctls and isolation between networks.
//!
//! Each test builds its own network and skips (or, with CI=true, fails) without root.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastfallback_testnet::{
    Action, CLIENT_V4, DNS_V4, Dir, DnsZone, HttpsSpec, Match, Rcode, Rule, ServerKind,
    SocketProto, TestNet, Verdict, flags, or_skip, server_v4, server_v6,
};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::svcb::{SvcParamKey, SvcParamValue};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn v4(i: u8, port: u16) -> SocketAddr {
    SocketAddr::from((server_v4(i), port))
}

fn v6(i: u8, port: u16) -> SocketAddr {
    SocketAddr::from((server_v6(i), port))
}

fn net(test: &str) -> Option<TestNet> {
    or_skip(test, TestNet::builder().build())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// How long a connect to `addr` takes, and its result (1 s limit).
async fn timed_connect(addr: SocketAddr) -> (Duration, io::Result<TcpStream>) {
    let start = Instant::now();
    let r = match timeout(Duration::from_secs(1), TcpStream::connect(addr)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::from(io::ErrorKind::TimedOut)),
    };
    (start.elapsed(), r)
}

/// Waits (up to 2 s) until `f` holds: the server accepts a connection only after the
/// client's last handshake ACK has crossed the wire, which is after the client's connect
/// returned.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(ms(2));
    }
    f()
}

fn assert_within(what: &str, got: Duration, lo: Duration, hi: Duration) {
    assert!(
        lo <= got && got <= hi,
        "{what}: {got:?} not within [{lo:?}, {hi:?}]"
    );
}

/// How much later than its rule one measurement may come on a busy machine. Medians keep
/// tight bounds (they check the precision of the wire's delays); a single connect
/// or query may be late by a scheduling delay, never early, and each check's wrong outcome
/// (no delay, another rule's delay, a refusal) is further away than this.
const LOAD_SLACK: Duration = Duration::from_millis(25);

/// Asserts that one measurement came no earlier than `rule` and at most [`LOAD_SLACK`] later.
fn assert_after(what: &str, got: Duration, rule: Duration) {
    assert_within(what, got, rule, rule + LOAD_SLACK);
}

#[test]
fn delay_rule_adds_its_rtt_to_connect() {
    let Some(net) = net("delay_rule_adds_its_rtt_to_connect") else {
        return;
    };
    net.serve(v4(0, 443), ServerKind::Accept).expect("serve v4");
    net.serve(v6(0, 443), ServerKind::Accept).expect("serve v6");
    net.set_rules(vec![Rule::delay(Match::V4, ms(20))]);
    let (t4, t6) = net.block_on_client(async {
        let (mut t4, mut t6) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let (t, r) = timed_connect(v4(0, 443)).await;
            r.expect("v4 connects");
            t4.push(t);
            let (t, r) = timed_connect(v6(0, 443)).await;
            r.expect("v6 connects");
            t6.push(t);
        }
        (t4, t6)
    });
    eprintln!("connect v4 (RTT 40 ms): {t4:?}\nconnect v6 (no rule): {t6:?}");
    assert_within("v4 median", median(t4), ms(40), ms(48));
    assert_within("v6 median", median(t6), ms(0), ms(5));
    assert!(eventually(|| net.accepted(v4(0, 443)) == 5));
}

#[test]
fn blackhole_makes_connect_hang() {
    let Some(net) = net("blackhole_makes_connect_hang") else {
        return;
    };
    net.serve(v4(0, 443), ServerKind::Accept).expect("serve");
    net.serve(v6(0, 443), ServerKind::Accept).expect("serve");
    net.set_rules(vec![Rule::blackhole(Match::Addr(server_v6(0).into()))]);
    let (hung, other) = net.block_on_client(async {
        let hung = timeout(ms(300), TcpStream::connect(v6(0, 443))).await;
        let other = timed_connect(v4(0, 443)).await;
        (hung.is_err(), other.1.is_ok())
    });
    assert!(hung, "connect to the black hole returned within 300 ms");
    assert!(other, "the other address is unaffected");
    assert_eq!(net.accepted(v6(0, 443)), 0);
    let dropped: Vec<_> = net
        .log()
        .into_iter()
        .filter(|e| e.dst == v6(0, 443))
        .collect();
    assert!(!dropped.is_empty());
    assert!(
        dropped
            .iter()
            .all(|e| e.verdict == Verdict::Dropped && e.rule == Some(0))
    );
}

#[test]
fn rst_rule_refuses_after_one_rtt() {
    let Some(net) = net("rst_rule_refuses_after_one_rtt") else {
        return;
    };
    // A server is listening, but the wire answers first.
    net.serve(v4(1, 443), ServerKind::Accept).expect("serve");
    net.set_rules(vec![
        Rule::rst(Match::Addr(server_v4(1).into())).one_way(ms(15)),
        Rule::rst(Match::V6),
    ]);
    let (t4, t6) = net.block_on_client(async {
        let (mut t4, mut t6) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (t, r) = timed_connect(v4(1, 443)).await;
            assert_eq!(
                r.expect_err("refused").kind(),
                io::ErrorKind::ConnectionRefused
            );
            t4.push(t);
            let (t, r) = timed_connect(v6(2, 8443)).await;
            assert_eq!(
                r.expect_err("refused").kind(),
                io::ErrorKind::ConnectionRefused
            );
            t6.push(t);
        }
        (t4, t6)
    });
    eprintln!("RST after RTT 30 ms: {t4:?}; RST at once: {t6:?}");
    assert_within("v4 median", median(t4), ms(30), ms(38));
    assert_within("v6 median", median(t6), ms(0), ms(5));
    assert_eq!(net.accepted(v4(1, 443)), 0, "the server never saw a SYN");
    let log = net.log();
    assert!(
        log.iter()
            .any(|e| e.verdict == Verdict::Answered(Action::Rst))
    );
    let made: Vec<_> = log
        .iter()
        .filter(|e| e.verdict == Verdict::Synthesized(Action::Rst))
        .collect();
    assert_eq!(made.len(), 6);
    assert!(
        made.iter()
            .all(|e| e.dir == Dir::ServerToClient && e.flags == flags::RST | flags::ACK)
    );
}

#[test]
fn closed_port_is_refused_by_the_server_kernel() {
    let Some(net) = net("closed_port_is_refused_by_the_server_kernel") else {
        return;
    };
    let errs = net.block_on_client(async {
        let a = timed_connect(v4(2, 9)).await;
        let b = timed_connect(v6(2, 9)).await;
        [a, b].map(|(t, r)| (t, r.map(drop).map_err(|e| e.kind())))
    });
    for (t, r) in errs {
        assert_eq!(r, Err(io::ErrorKind::ConnectionRefused));
        assert!(t < ms(100), "{t:?}");
    }
}

#[test]
fn icmp_rules_give_the_kernel_errnos() {
    let Some(net) = net("icmp_rules_give_the_kernel_errnos") else {
        return;
    };
    let at = |i| Match::Addr(IpAddr::from(server_v4(i)));
    let at6 = |i| Match::Addr(IpAddr::from(server_v6(i)));
    // Each ICMP error comes back 2 ms after its SYN. One that came at once could reach the
    // socket while `connect` still holds the socket's lock, and Linux keeps an ICMP error
    // that arrives then only as a soft error (`tcp_v4_err`, `tcp_v6_err`): the connect
    // would wait for its SYN's retransmission, a second later.
    let icmp = |rule: Rule| rule.one_way(ms(1));
    net.set_rules(vec![
        icmp(Rule::icmp_port(at(0))),
        icmp(Rule::icmp_host(at(1))),
        icmp(Rule::icmp_admin(at(2))),
        icmp(Rule::icmp_port(at6(0))),
        icmp(Rule::icmp_host(at6(1))),
        icmp(Rule::icmp_admin(at6(2))),
    ]);
    let cases = [
        (v4(0, 443), libc::ECONNREFUSED),
        (v4(1, 443), libc::EHOSTUNREACH),
        (v4(2, 443), libc::EHOSTUNREACH),
        (v6(0, 443), libc::ECONNREFUSED),
        (v6(1, 443), libc::EHOSTUNREACH),
        (v6(2, 443), libc::EACCES),
    ];
    let results = net.block_on_client(async move {
        let mut out = Vec::new();
        // Three rounds: the wire's ICMP is never rate-limited.
        for _ in 0..3 {
            for (addr, _) in cases {
                let (t, r) = timed_connect(addr).await;
                // A connect that succeeds shows its own addresses.
                let r = r.map(|s| (s.local_addr().ok(), s.peer_addr().ok()));
                out.push((addr, t, r.map_err(|e| e.raw_os_error())));
            }
        }
        out
    });
    for (addr, t, r) in results {
        let want = cases
            .iter()
            .find(|(a, _)| *a == addr)
            .map(|(_, e)| *e)
            .expect("case");
        // A mismatch (seen once in CI: a connect to a host-unreachable address succeeded)
        // shows what the wire saw and did for that address, so it explains itself.
        let wire = || {
            net.log()
                .into_iter()
                .filter(|e| e.src.ip() == addr.ip() || e.dst.ip() == addr.ip())
                .map(|e| format!("\n  {e:?}"))
                .collect::<String>()
        };
        assert_eq!(r, Err(Some(want)), "connect to {addr}; the wire:{}", wire());
        assert!(
            t < ms(50),
            "connect to {addr} took {t:?}; the wire:{}",
            wire()
        );
    }
}

#[test]
fn stall_lets_handshake_through_and_drops_data() {
    let Some(net) = net("stall_lets_handshake_through_and_drops_data") else {
        return;
    };
    let tls = v4(0, 443);
    let held = v6(1, 443);
    net.serve(
        tls,
        ServerKind::Tls {
            alpn: vec![b"h2".to_vec()],
        },
    )
    .expect("serve tls");
    net.serve(held, ServerKind::Accept).expect("serve accept");
    net.set_rules(vec![Rule::stall(Match::Addr(tls.ip()), ms(5))]);
    let (connect_times, reads) = net.block_on_client(async move {
        let mut times = Vec::new();
        let mut reads = Vec::new();
        for addr in [tls, held] {
            let (t, r) = timed_connect(addr).await;
            let mut s = r.expect("handshake goes through");
            times.push(t);
            // Something the size of a ClientHello.
            s.write_all(&[0x16; 300]).await.expect("write is buffered");
            let mut buf = [0u8; 64];
            reads.push(timeout(ms(300), s.read(&mut buf)).await.is_err());
        }
        (times, reads)
    });
    // One sample only: a loose window (the delay rule's accuracy has its own test).
    assert_within("stalled connect", connect_times[0], ms(10), ms(100));
    assert_eq!(reads, vec![true, true], "both reads time out");
    assert!(eventually(
        || net.accepted(tls) == 1 && net.accepted(held) == 1
    ));
}

#[test]
fn syn_log_records_attempt_order_and_times() {
    let Some(net) = net("syn_log_records_attempt_order_and_times") else {
        return;
    };
    net.serve(v4(0, 443), ServerKind::Accept).expect("serve");
    net.set_rules(vec![Rule::blackhole(Match::V6)]);
    net.clear_log();
    // Three rounds of "IPv6 first, IPv4 50 ms later" (a hand-made Happy Eyeballs).
    net.block_on_client(async {
        for _ in 0..3 {
            let first = tokio::spawn(TcpStream::connect(v6(0, 443)));
            tokio::time::sleep(ms(50)).await;
            let second = TcpStream::connect(v4(0, 443)).await;
            assert!(second.is_ok());
            assert!(!first.is_finished(), "v6 hangs");
            first.abort();
        }
    });
    let syns = net.syns();
    let order: Vec<SocketAddr> = syns.iter().map(|s| s.1).collect();
    assert_eq!(
        order,
        [v6(0, 443), v4(0, 443)].repeat(3),
        "one attempt each per round, IPv6 first"
    );
    let gaps: Vec<Duration> = syns.chunks(2).map(|p| p[1].0 - p[0].0).collect();
    eprintln!("gaps between attempts: {gaps:?}");
    // The wire stamps packets when it reads them, which may lag the send by a little.
    assert_within("median gap", median(gaps), ms(48), ms(58));
    let log = net.log();
    let syn_ack = log
        .iter()
        .find(|e| e.dir == Dir::ServerToClient && e.flags == flags::SYN | flags::ACK)
        .expect("the server's SYN|ACK is logged");
    assert_eq!(syn_ack.src, v4(0, 443));
    assert_eq!(syn_ack.verdict, Verdict::Delivered);
}

/// Sends one query over UDP from the client namespace; returns (elapsed, response).
async fn udp_query(name: &str, qtype: RecordType) -> (Duration, Message) {
    let sock = UdpSocket::bind((CLIENT_V4, 0)).await.expect("bind");
    sock.connect((DNS_V4, 53)).await.expect("connect");
    let mut q = Message::query();
    q.metadata.recursion_desired = true;
    q.add_query(Query::query(Name::from_ascii(name).expect("name"), qtype));
    let start = Instant::now();
    sock.send(&q.to_vec().expect("encode")).await.expect("send");
    let mut buf = vec![0u8; 4096];
    let n = timeout(ms(2000), sock.recv(&mut buf))
        .await
        .expect("answer in time")
        .expect("recv");
    let resp = Message::from_vec(&buf[..n]).expect("decode");
    assert_eq!(resp.metadata.id, q.metadata.id);
    (start.elapsed(), resp)
}

#[test]
fn dns_answers_each_type_after_its_own_delay() {
    let Some(net) = net("dns_answers_each_type_after_its_own_delay") else {
        return;
    };
    net.set_dns(
        "Origin.Test.",
        DnsZone {
            aaaa: vec![server_v6(0), server_v6(1)],
            a: vec![server_v4(0)],
            https: vec![HttpsSpec {
                priority: 1,
                target: ".".into(),
                alpn: vec!["h2".into(), "http/1.1".into()],
                no_default_alpn: false,
                port: Some(8443),
                ipv4hint: vec![server_v4(0)],
                ipv6hint: vec![server_v6(0)],
                ech: None,
            }],
            aaaa_delay: ms(150),
            a_delay: ms(0),
            https_delay: ms(60),
            rcode: None,
        },
    );
    let (aaaa, a, https) = net.block_on_client(async {
        tokio::join!(
            udp_query("origin.test.", RecordType::AAAA),
            udp_query("origin.test.", RecordType::A),
            udp_query("origin.test.", RecordType::HTTPS),
        )
    });
    eprintln!("A {:?}, HTTPS {:?}, AAAA {:?}", a.0, https.0, aaaa.0);
    assert_after("A", a.0, ms(0));
    assert_after("HTTPS", https.0, ms(60));
    assert_after("AAAA", aaaa.0, ms(150));

    let ips = |m: &Message| -> Vec<IpAddr> {
        m.answers.iter().filter_map(|r| r.data.ip_addr()).collect()
    };
    assert_eq!(ips(&a.1), vec![IpAddr::from(server_v4(0))]);
    assert_eq!(
        ips(&aaaa.1),
        vec![IpAddr::from(server_v6(0)), IpAddr::from(server_v6(1))]
    );
    let RData::HTTPS(rec) = &https.1.answers[0].data else {
        panic!("not an HTTPS record: {:?}", https.1.answers);
    };
    assert_eq!(rec.svc_priority, 1);
    assert!(rec.target_name.is_root());
    let keys: Vec<SvcParamKey> = rec.svc_params.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        vec![
            SvcParamKey::Alpn,
            SvcParamKey::Port,
            SvcParamKey::Ipv4Hint,
            SvcParamKey::Ipv6Hint
        ]
    );
    assert!(matches!(rec.svc_params[1].1, SvcParamValue::Port(8443)));
    let counts = net.dns_queries("ORIGIN.test");
    assert_eq!((counts.a, counts.aaaa, counts.https), (1, 1, 1));
}

#[test]
fn dns_negative_answers_and_tcp() {
    let Some(net) = net("dns_negative_answers_and_tcp") else {
        return;
    };
    net.set_dns(
        "v4only.test",
        DnsZone {
            a: vec![server_v4(2)],
            ..DnsZone::default()
        },
    );
    net.set_dns(
        "broken.test",
        DnsZone {
            rcode: Some(Rcode::ServFail),
            ..DnsZone::default()
        },
    );
    net.set_dns(
        "gone.test",
        DnsZone {
            a: vec![server_v4(2)],
            rcode: Some(Rcode::NxDomain),
            ..DnsZone::default()
        },
    );
    let (nodata, nx, servfail, gone, tcp) = net.block_on_client(async {
        let nodata = udp_query("v4only.test.", RecordType::AAAA).await.1;
        let nx = udp_query("nowhere.test.", RecordType::A).await.1;
        let servfail = udp_query("broken.test.", RecordType::A).await.1;
        let gone = udp_query("gone.test.", RecordType::A).await.1;
        // The same A query over TCP (2-byte length prefix).
        let mut s = TcpStream::connect((DNS_V4, 53)).await.expect("tcp connect");
        let mut q = Message::query();
        q.add_query(Query::query(
            Name::from_ascii("v4only.test.").expect("name"),
            RecordType::A,
        ));
        let bytes = q.to_vec().expect("encode");
        s.write_all(&(bytes.len() as u16).to_be_bytes())
            .await
            .expect("write");
        s.write_all(&bytes).await.expect("write");
        let len = timeout(ms(2000), s.read_u16())
            .await
            .expect("in time")
            .expect("len");
        let mut buf = vec![0u8; usize::from(len)];
        s.read_exact(&mut buf).await.expect("read");
        (
            nodata,
            nx,
            servfail,
            gone,
            Message::from_vec(&buf).expect("decode"),
        )
    });
    assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
    assert!(nodata.answers.is_empty());
    assert!(
        matches!(
            nodata.authorities.first().map(|r| &r.data),
            Some(RData::SOA(_))
        ),
        "NODATA carries an SOA: {:?}",
        nodata.authorities
    );
    assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
    assert!(matches!(
        nx.authorities.first().map(|r| &r.data),
        Some(RData::SOA(_))
    ));
    assert_eq!(servfail.metadata.response_code, ResponseCode::ServFail);
    assert_eq!(gone.metadata.response_code, ResponseCode::NXDomain);
    assert!(gone.answers.is_empty());
    assert_eq!(tcp.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        tcp.answers
            .iter()
            .filter_map(|r| r.data.ip_addr())
            .collect::<Vec<_>>(),
        vec![IpAddr::from(server_v4(2))]
    );
    assert_eq!(net.dns_queries("v4only.test").a, 1);
    assert_eq!(net.dns_queries("v4only.test").aaaa, 1);
    assert_eq!(net.dns_queries("nowhere.test").a, 1);
}

#[test]
fn dns_over_tcp_answers_each_query_independently() {
    let Some(net) = net("dns_over_tcp_answers_each_query_independently") else {
        return;
    };
    net.set_dns(
        "slow.test",
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            aaaa_delay: ms(100),
            ..DnsZone::default()
        },
    );
    let (order, took) = net.block_on_client(async {
        let mut s = TcpStream::connect((DNS_V4, 53)).await.expect("tcp connect");
        let start = Instant::now();
        // AAAA (slow) first, then A, on one connection.
        for qtype in [RecordType::AAAA, RecordType::A] {
            let mut q = Message::query();
            q.add_query(Query::query(
                Name::from_ascii("slow.test.").expect("name"),
                qtype,
            ));
            let bytes = q.to_vec().expect("encode");
            s.write_all(&(bytes.len() as u16).to_be_bytes())
                .await
                .expect("write");
            s.write_all(&bytes).await.expect("write");
        }
        let mut order = Vec::new();
        let mut took = Vec::new();
        for _ in 0..2 {
            let len = timeout(ms(2000), s.read_u16())
                .await
                .expect("in time")
                .expect("len");
            let mut buf = vec![0u8; usize::from(len)];
            s.read_exact(&mut buf).await.expect("read");
            let m = Message::from_vec(&buf).expect("decode");
            order.push(m.queries[0].query_type());
            took.push(start.elapsed());
        }
        (order, took)
    });
    assert_eq!(order, vec![RecordType::A, RecordType::AAAA]);
    assert!(took[0] < ms(50), "A was not held back: {took:?}");
    assert_after("AAAA", took[1], ms(100));
}

fn tls_client(net: &TestNet, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(net.ca_der()).expect("CA");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

#[test]
fn tls_server_completes_handshake_with_the_test_ca() {
    let Some(net) = or_skip(
        "tls_server_completes_handshake_with_the_test_ca",
        TestNet::builder()
            .tls_names(&["origin.test", "alt.test"])
            .build(),
    ) else {
        return;
    };
    for addr in [v4(0, 443), v6(0, 443)] {
        net.serve(
            addr,
            ServerKind::Tls {
                alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            },
        )
        .expect("serve");
    }
    let connector = tls_client(&net, &[b"http/1.1", b"h2"]);
    let alpns = net.block_on_client(async move {
        let mut alpns = Vec::new();
        for (addr, name) in [
            (
                v4(0, 443),
                rustls::pki_types::ServerName::try_from("origin.test").expect("name"),
            ),
            (
                v6(0, 443),
                rustls::pki_types::ServerName::try_from("alt.test").expect("name"),
            ),
            (
                v4(0, 443),
                rustls::pki_types::ServerName::from(IpAddr::from(server_v4(0))),
            ),
        ] {
            let tcp = TcpStream::connect(addr).await.expect("connect");
            let mut tls = timeout(ms(2000), connector.connect(name, tcp))
                .await
                .expect("handshake in time")
                .expect("handshake");
            alpns.push(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec));
            tls.write_all(b"GET / HTTP/1.1\r\n\r\n")
                .await
                .expect("write");
            tls.shutdown().await.expect("close_notify");
            let mut rest = Vec::new();
            // The server reads to EOF, then closes: we see EOF too.
            timeout(ms(2000), tls.read_to_end(&mut rest))
                .await
                .expect("server closes")
                .expect("clean close");
        }
        alpns
    });
    // The server's preference wins: h2.
    assert_eq!(alpns, vec![Some(b"h2".to_vec()); 3]);
    assert!(eventually(
        || net.accepted(v4(0, 443)) == 2 && net.accepted(v6(0, 443)) == 1
    ));

    // A name that is not in the certificate is refused.
    let connector = tls_client(&net, &[b"h2"]);
    let err = net.block_on_client(async move {
        let tcp = TcpStream::connect(v4(0, 443)).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("other.test").expect("name");
        connector.connect(name, tcp).await.expect_err("wrong name")
    });
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
}

#[test]
fn client_sockets_lists_the_client_namespace_only() {
    let Some(net) = net("client_sockets_lists_the_client_namespace_only") else {
        return;
    };
    let listener = net.client(|| std::net::TcpListener::bind((CLIENT_V4, 47123)).expect("bind"));
    let udp = net.client(|| std::net::UdpSocket::bind("[::]:47124").expect("bind"));
    let seen = net.client_sockets().expect("read /proc");
    let ours =
        |e: &&fastfallback_testnet::SocketEntry| e.local.port() == 47123 || e.local.port() == 47124;
    assert_eq!(seen.iter().filter(ours).count(), 2, "{seen:#?}");
    let tcp = seen
        .iter()
        .find(|e| e.local.port() == 47123)
        .expect("listener");
    assert_eq!((tcp.proto, tcp.state), (SocketProto::Tcp, "LISTEN"));
    assert_eq!(tcp.local.ip(), IpAddr::from(CLIENT_V4));
    // The host's table (this thread is in the host namespace) does not have them.
    let host = std::fs::read_to_string("/proc/thread-self/net/tcp").expect("host table");
    assert!(
        !host.contains(":B7D3 "),
        "the client listener leaked into the host table"
    );
    drop((listener, udp));
    let after = net.client_sockets().expect("read /proc");
    assert_eq!(after.iter().filter(ours).count(), 0, "{after:#?}");
}

#[test]
fn sysctls_land_in_the_client_namespace_only() {
    let read = |key: &str| {
        std::fs::read_to_string(format!("/proc/sys/{key}"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let host_before = read("net/ipv4/tcp_syn_retries");
    let Some(net) = or_skip(
        "sysctls_land_in_the_client_namespace_only",
        TestNet::builder().syn_retries(3).build(),
    ) else {
        return;
    };
    let inside = net.client(|| {
        (
            read("net/ipv4/tcp_syn_retries"),
            read("net/ipv4/icmp_ratelimit"),
            read("net/ipv6/icmp/ratelimit"),
        )
    });
    assert_eq!(inside, ("3".into(), "0".into(), "0".into()));
    assert_eq!(net.server(|| read("net/ipv4/icmp_ratelimit")), "0");
    assert_eq!(
        read("net/ipv4/tcp_syn_retries"),
        host_before,
        "host untouched"
    );
}

#[test]
fn two_nets_with_the_same_addresses_do_not_interfere() {
    let build = |name| {
        std::thread::spawn(move || {
            or_skip(name, TestNet::builder().build()).map(|net| (net, Instant::now()))
        })
    };
    let (a, b) = (build("two_nets_a"), build("two_nets_b"));
    let (Some((a, _)), Some((b, _))) = (a.join().expect("a"), b.join().expect("b")) else {
        return;
    };
    a.serve(v4(0, 443), ServerKind::Accept).expect("serve a");
    b.serve(v4(0, 443), ServerKind::Accept).expect("serve b");
    a.set_rules(vec![Rule::delay(Match::V4, ms(30))]);
    b.set_rules(vec![Rule::rst(Match::V4)]);
    let (ra, rb) = std::thread::scope(|s| {
        let ra = s.spawn(|| {
            a.block_on_client(async {
                let (t, r) = timed_connect(v4(0, 443)).await;
                (t, r.is_ok())
            })
        });
        let rb = s.spawn(|| {
            b.block_on_client(async {
                let (t, r) = timed_connect(v4(0, 443)).await;
                (t, r.map(drop).map_err(|e| e.kind()))
            })
        });
        (ra.join().expect("a"), rb.join().expect("b"))
    });
    assert!(ra.1, "net a connects");
    assert_after("net a", ra.0, ms(60));
    assert_eq!(rb.1, Err(io::ErrorKind::ConnectionRefused));
    assert!(rb.0 < ms(20), "net b refuses at once: {:?}", rb.0);
    assert!(eventually(|| a.accepted(v4(0, 443)) == 1));
    assert_eq!(b.accepted(v4(0, 443)), 0);
    assert_eq!((a.syns().len(), b.syns().len()), (1, 1));
}

#[test]
fn total_loss_drops_both_ways_and_logs_lost() {
    let Some(net) = or_skip(
        "total_loss_drops_both_ways_and_logs_lost",
        TestNet::builder().seed(7).build(),
    ) else {
        return;
    };
    net.serve(v4(3, 443), ServerKind::Accept).expect("serve");
    net.set_rules(vec![
        Rule::new(Match::Addr(server_v4(3).into()), Action::Pass)
            .port(443)
            .loss(1.0),
    ]);
    let hung = net.block_on_client(async {
        timeout(ms(200), TcpStream::connect(v4(3, 443)))
            .await
            .is_err()
    });
    assert!(hung);
    let log = net.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!((log[0].verdict, log[0].rule), (Verdict::Lost, Some(0)));
    assert_eq!(net.accepted(v4(3, 443)), 0);
}
