//! The driver on a real dual-stack network: client and server namespaces joined by a TUN wire
//! with per-destination delay, blackhole, reset, ICMP and stall rules, and a DNS server inside
//! the network (crates/testnet). These tests need root (CAP_NET_ADMIN); without it they print
//! "skipped: needs CAP_NET_ADMIN" and pass, except under `CI=true`, where they fail.
//!
//! Timings are read from two independent clocks: the race's own report, and the wire's log of
//! every SYN. Tolerances are −1/+10 ms (the wire adds 0.3–0.5 ms; tokio's timer has
//! 1 ms granularity). The tests run one at a time so they do not compete for the two cores.
//!
//! Socket accounting: when each test ends, the client namespace holds no socket at all (the
//! namespace is the test's own, so anything there was opened by the test; `Net`'s drop checks
//! it), and while a won connection is held, exactly one TCP socket exists: the winner's.

mod support;
#[path = "support/testnet.rs"]
mod testnet_support;

use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use support::Millis;

use fastfallback_net::{
    AnswerReport, ConnectError, Connector, FallbackPolicy, Origin, Pool, PoolOptions, RaceReport,
    Source,
};
use fastfallback_proto::{AttemptErrorKind, QueryKind, RaceErrorKind};
use fastfallback_route::{Host, Proxy, ProxyDns};
use fastfallback_testnet::{
    DnsZone, HttpsSpec, Match, Rule, ServerKind, SocketProto, TestNet, or_skip, server_v4,
    server_v6,
};

/// One test at a time: the timings should not depend on what the other core is doing.
static SERIAL: Mutex<()> = Mutex::new(());

const NAME: &str = "origin.test";
/// The public name of the ECH configurations the tests publish (the certificate covers it).
const PUBLIC_NAME: &str = "public.test";
const PORT: u16 = 80;
const TLS_PORT: u16 = 443;
const RTT: Duration = Duration::from_millis(20);
/// How late one timing read off the race's report or the wire's log may be.
///
/// Nothing happens early, so every lower bound is tight (−1 ms, for rounding between the
/// wire's clock and the race's). Upper bounds are loose: the wire's delays are kept by a
/// userspace thread, the DNS server and the race run on the same two cores as the rest of
/// CI, and a busy VM has made a 20 ms RTT take 30 ms and an answer come 25 ms late. The
/// exact timelines are asserted on virtual time (the sim in `crates/plan`, the driver's
/// paused-time tests); here each upper bound only has to tell the behaviour under test from
/// the wrong one it guards against, and each of those is more than this far away.
const SLACK: f64 = 25.0;

fn v6(i: u8) -> IpAddr {
    IpAddr::V6(server_v6(i))
}

fn v4(i: u8) -> IpAddr {
    IpAddr::V4(server_v4(i))
}

fn half(rtt: Duration) -> Duration {
    rtt / 2
}

/// A test's network, held one test at a time. When the test ends without a panic, it checks
/// that the client namespace holds no socket: nothing the test opened is left open.
struct Net {
    net: TestNet,
    _serial: MutexGuard<'static, ()>,
}

impl Deref for Net {
    type Target = TestNet;
    fn deref(&self) -> &TestNet {
        &self.net
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert_no_client_sockets(&self.net);
        }
    }
}

/// A network with `origin.test` at server 0 of each family and TCP servers on port 80 of both.
fn network(test: &str) -> Option<Net> {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let net = or_skip(
        test,
        TestNet::builder()
            .servers(4)
            .tls_names(&[NAME, PUBLIC_NAME])
            .build(),
    )?;
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            ..DnsZone::default()
        },
    );
    for ip in [v6(0), v4(0)] {
        net.serve(SocketAddr::new(ip, PORT), ServerKind::Accept)
            .unwrap();
    }
    Some(Net {
        net,
        _serial: serial,
    })
}

/// One contact with `origin.test:80` from the client namespace.
fn contact(net: &TestNet, policy: FallbackPolicy) -> Result<RaceReport, ConnectError> {
    net.block_on_client(async {
        let origin = format!("{NAME}:{PORT}");
        let conn = connector(net, policy).connect(&origin).await?;
        Ok(conn.into_parts().1)
    })
}

/// A connector that asks the network's DNS server, with no resolver cache (each contact
/// sends its queries) and the test CA as the only root.
fn connector(net: &TestNet, policy: FallbackPolicy) -> Connector {
    connector_via(net, policy, None)
}

/// [`connector`], connecting through `proxy` when given.
fn connector_via(net: &TestNet, policy: FallbackPolicy, proxy: Option<Proxy>) -> Connector {
    let builder = testnet_support::builder(net)
        .policy(policy)
        // Seeds 0..6 never make a race ignore history, so memory tests are repeatable.
        .rng_seed(0);
    match proxy {
        Some(p) => builder.proxy(p),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Fails the test if the client namespace still holds any socket.
fn assert_no_client_sockets(net: &TestNet) {
    let left = net.client_sockets().unwrap();
    assert!(
        left.is_empty(),
        "sockets left in the client namespace: {left:#?}"
    );
}

/// TCP sockets the client namespace holds now.
fn client_tcp_sockets(net: &TestNet) -> usize {
    net.client_sockets()
        .unwrap()
        .iter()
        .filter(|s| s.proto == SocketProto::Tcp)
        .count()
}

/// Asserts that `got` is `want` or up to [`SLACK`] later (never more than 1 ms earlier).
fn assert_near(what: &str, got: f64, want: f64) {
    assert!(
        got >= want - 1.0 && got <= want + SLACK,
        "{what}: {got:.1} ms, expected {want:.1} ms (−1/+{SLACK} ms)"
    );
}

/// When the race had the answer to its `kind` query, in ms on the race's clock.
fn answered_ms(report: &RaceReport, kind: QueryKind) -> f64 {
    report
        .queries
        .iter()
        .find(|q| q.kind == kind)
        .and_then(|q| q.answered)
        .map(|at| at.ms())
        .unwrap_or_else(|| panic!("a {kind:?} answer\n{report}"))
}

/// The wire's SYNs, as (ms after the first SYN, destination).
fn syn_offsets(net: &TestNet) -> Vec<(f64, SocketAddr)> {
    let syns = net.syns();
    let Some(&(t0, _)) = syns.first() else {
        return Vec::new();
    };
    syns.iter()
        .map(|(t, dst)| (t.duration_since(t0).as_secs_f64() * 1e3, *dst))
        .collect()
}

#[test]
fn v6_blackhole_starts_v4_after_attempt_delay() {
    let Some(net) = network("v6_blackhole_starts_v4_after_attempt_delay") else {
        return;
    };
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(0))),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    let report = net.block_on_client(async {
        let c = connector(&net, FallbackPolicy::default());
        let conn = c.connect(&format!("{NAME}:{PORT}")).await.unwrap();
        assert_eq!(conn.peer_addr(), SocketAddr::new(v4(0), PORT));
        // The loser was closed when the winner connected: only the winner's socket is left.
        assert_eq!(client_tcp_sockets(&net), 1, "{:#?}", net.client_sockets());
        conn.into_parts().1
    });

    assert_eq!(report.attempts_started(), 2, "{report}");
    let (a0, a1) = (&report.attempts[0], &report.attempts[1]);
    assert_eq!(a0.route, SocketAddr::new(v6(0), PORT), "{report}");
    assert!(
        a0.outcome
            .to_string()
            .starts_with("cancelled: lost the race"),
        "{report}"
    );
    assert_near(
        "second attempt after the first",
        a1.started.ms() - a0.started.ms(),
        250.0,
    );
    assert_near(
        "winner's connect",
        a1.ended.unwrap().ms() - a1.started.ms(),
        20.0,
    );
    // The wire saw the same timeline: SYN to IPv6, then SYN to IPv4 250 ms later.
    let syns = syn_offsets(&net);
    assert_eq!(syns[0].1, SocketAddr::new(v6(0), PORT));
    let first_v4 = syns.iter().find(|(_, d)| d.is_ipv4()).unwrap();
    assert_near("SYN to IPv4 on the wire", first_v4.0, 250.0);
    assert_eq!(net.client_connections(), 2);
}

#[test]
fn v6_reset_falls_back_to_v4_after_one_rtt() {
    let Some(net) = network("v6_reset_falls_back_to_v4_after_one_rtt") else {
        return;
    };
    net.set_rules(vec![
        Rule::rst(Match::Addr(v6(0))).one_way(half(RTT)),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    let report = contact(&net, FallbackPolicy::default()).unwrap();
    assert_eq!(report.attempts_started(), 2, "{report}");
    let (a0, a1) = (&report.attempts[0], &report.attempts[1]);
    assert!(
        a0.outcome
            .to_string()
            .starts_with("failed: connection refused"),
        "{report}"
    );
    assert_near("refusal", a0.ended.unwrap().ms() - a0.started.ms(), 20.0);
    // RFC 8305 §5: the failure starts the next attempt at once, not at 250 ms.
    assert_near("fallback start", a1.started.ms() - a0.started.ms(), 20.0);
    assert_near("total", report.elapsed.ms() - a0.started.ms(), 40.0);
}

#[test]
fn slow_aaaa_answer_is_not_waited_for_beyond_the_resolution_delay() {
    let Some(net) = network("slow_aaaa_answer_is_not_waited_for_beyond_the_resolution_delay")
    else {
        return;
    };
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            aaaa_delay: Duration::from_millis(300),
            ..DnsZone::default()
        },
    );
    net.set_rules(vec![
        Rule::delay(Match::Addr(v6(0)), half(RTT)),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    let report = contact(&net, FallbackPolicy::default()).unwrap();
    assert_eq!(report.attempts_started(), 1, "{report}");
    let a = &report.attempts[0];
    assert_eq!(a.route, SocketAddr::new(v4(0), PORT));
    // HEv3 §4.2: with only A in, wait the Resolution Delay (50 ms) for AAAA, then go.
    assert_near(
        "IPv4 start",
        a.started.ms(),
        answered_ms(&report, QueryKind::A) + 50.0,
    );
    assert_near(
        "won one RTT after the IPv4 start",
        report.elapsed.ms() - a.started.ms(),
        20.0,
    );
    let aaaa = report
        .queries
        .iter()
        .find(|q| q.kind == QueryKind::Aaaa)
        .unwrap();
    assert_eq!(
        aaaa.answered, None,
        "the race did not wait for AAAA\n{report}"
    );
}

#[test]
fn slower_family_loses_and_is_skipped_on_the_second_contact() {
    let Some(net) = network("slower_family_loses_and_is_skipped_on_the_second_contact") else {
        return;
    };
    net.set_rules(vec![
        Rule::delay(Match::Addr(v6(0)), Duration::from_millis(200)),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    let (first, second) = net.block_on_client(async {
        let c = connector(&net, FallbackPolicy::default());
        let origin = format!("{NAME}:{PORT}");
        let first = c.connect(&origin).await.unwrap().into_parts().1;
        let second = c.connect(&origin).await.unwrap().into_parts().1;
        (first, second)
    });
    // First contact: IPv6 (RTT 400 ms) is tried first; IPv4 starts at 250 ms and wins at 270.
    assert_eq!(first.attempts_started(), 2, "{first}");
    assert_eq!(
        first.winning_attempt().unwrap().route.ip(),
        v4(0),
        "{first}"
    );
    assert_near(
        "first contact",
        first.elapsed.ms() - first.attempts[0].started.ms(),
        270.0,
    );
    // Second contact: route memory knows IPv6 is slower and leads with IPv4.
    assert_eq!(second.attempts[0].route.ip(), v4(0), "{second}");
    assert_eq!(second.attempts_started(), 1, "{second}");
    assert_near(
        "second contact",
        second.elapsed.ms() - second.attempts[0].started.ms(),
        20.0,
    );
}

#[test]
fn second_contact_skips_the_blackholed_family() {
    let Some(net) = network("second_contact_skips_the_blackholed_family") else {
        return;
    };
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(0))),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    let second = net.block_on_client(async {
        let c = connector(&net, FallbackPolicy::default());
        let origin = format!("{NAME}:{PORT}");
        let first = c.connect(&origin).await.unwrap();
        assert_eq!(first.report().attempts_started(), 2);
        drop(first);
        c.connect(&origin).await.unwrap().into_parts().1
    });
    assert_eq!(second.attempts_started(), 1, "{second}");
    assert_eq!(second.attempts[0].route.ip(), v4(0), "{second}");
    assert_near(
        "second contact",
        second.elapsed.ms() - second.attempts[0].started.ms(),
        20.0,
    );
}

#[test]
fn stalled_tls_handshake_is_overtaken_by_the_next_route() {
    let Some(net) = network("stalled_tls_handshake_is_overtaken_by_the_next_route") else {
        return;
    };
    // IPv6 accepts TCP and never answers the ClientHello; IPv4 speaks TLS.
    net.serve(SocketAddr::new(v6(0), TLS_PORT), ServerKind::Accept)
        .unwrap();
    net.serve(
        SocketAddr::new(v4(0), TLS_PORT),
        ServerKind::Tls {
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        },
    )
    .unwrap();
    net.set_rules(vec![
        Rule::delay(Match::Addr(v6(0)), half(RTT)),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    // A fixed attempt delay: with the adaptive one, the 20 ms RTT learned from the IPv6 TCP
    // handshake would give max(250, 20 + 3 × 20 → 100) = 250 and hide the extension.
    let policy = FallbackPolicy::builder()
        .adaptive_attempt_delay(false)
        .build()
        .unwrap();
    let report = net.block_on_client(async {
        let c = connector(&net, policy);
        let conn = c
            .connect(&format!("https://{NAME}:{TLS_PORT}"))
            .await
            .unwrap();
        assert_eq!(conn.alpn().map(ToString::to_string).as_deref(), Some("h2"));
        conn.into_parts().1
    });
    assert_eq!(report.attempts_started(), 2, "{report}");
    let (a0, a1) = (&report.attempts[0], &report.attempts[1]);
    assert_near(
        "IPv6 TCP",
        a0.tcp_connected.unwrap().ms() - a0.started.ms(),
        20.0,
    );
    assert!(
        a0.outcome
            .to_string()
            .starts_with("cancelled: lost the race"),
        "{report}"
    );
    // HEv3 §6.1 (profile P6): TCP at 20 ms moves the next start to max(250, 20 + 250) = 270.
    assert_near("IPv4 start", a1.started.ms() - a0.started.ms(), 270.0);
    // TCP (1 RTT) + TLS 1.3 (1 RTT) = 40 ms, plus the handshake's CPU time on both ends,
    // which in an unoptimised test build is several ms on a busy core.
    let tls = a1.ended.unwrap().ms() - a1.started.ms();
    assert!(
        (39.0..40.0 + SLACK + 10.0).contains(&tls),
        "IPv4 TCP + TLS: {tls:.1} ms, expected 40 ms + CPU"
    );
}

#[test]
fn every_attempt_failing_reports_each_cause_in_start_order() {
    let Some(net) = network("every_attempt_failing_reports_each_cause_in_start_order") else {
        return;
    };
    net.set_rules(vec![
        Rule::rst(Match::Addr(v6(0))).one_way(half(RTT)),
        Rule::icmp_host(Match::Addr(v4(0))).one_way(half(RTT)),
    ]);
    let err = contact(&net, FallbackPolicy::default()).unwrap_err();
    let race = err.race_error().expect("the race ran");
    assert_eq!(race.kind, RaceErrorKind::AllAttemptsFailed);
    let causes: Vec<(IpAddr, AttemptErrorKind)> = race
        .attempts
        .iter()
        .map(|a| (a.addr.ip(), a.error.kind))
        .collect();
    assert_eq!(
        causes,
        [
            (v6(0), AttemptErrorKind::Refused),
            (v4(0), AttemptErrorKind::Unreachable)
        ]
    );
    assert_eq!(
        race.primary().unwrap().addr.ip(),
        v6(0),
        "refused is more telling"
    );
    let report = err.report().unwrap();
    assert_near(
        "both failed",
        report.elapsed.ms() - report.attempts[0].started.ms(),
        40.0,
    );
}

#[test]
fn dropping_the_connect_future_mid_race_closes_every_socket() {
    let Some(net) = network("dropping_the_connect_future_mid_race_closes_every_socket") else {
        return;
    };
    net.set_rules(vec![Rule::blackhole(Match::Any).port(PORT)]);
    net.block_on_client(async {
        let c = connector(&net, FallbackPolicy::default());
        let origin = format!("{NAME}:{PORT}");
        let race = c.connect(&origin);
        // Both attempts are in flight at 300 ms; the caller gives up then.
        let gave_up = tokio::time::timeout(Duration::from_millis(300), race).await;
        assert!(gave_up.is_err(), "a blackholed origin cannot connect");
        assert_eq!(client_tcp_sockets(&net), 0, "{:#?}", net.client_sockets());
    });
    assert_eq!(net.client_connections(), 2, "two attempts were in flight");
}

#[test]
fn connect_deadline_ends_a_blackholed_race_with_every_cause() {
    let Some(net) = network("connect_deadline_ends_a_blackholed_race_with_every_cause") else {
        return;
    };
    net.set_rules(vec![Rule::blackhole(Match::Any).port(PORT)]);
    let policy = FallbackPolicy::builder()
        .connect_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let err = contact(&net, policy).unwrap_err();
    let race = err.race_error().unwrap();
    assert_eq!(race.kind, RaceErrorKind::TimedOut);
    assert_eq!(race.attempts.len(), 2);
    assert!(
        race.attempts
            .iter()
            .all(|a| a.error.kind == AttemptErrorKind::TimedOut)
    );
    assert_near("deadline", err.report().unwrap().elapsed.ms(), 600.0);
}

#[test]
fn attempt_timeout_moves_on_before_the_attempt_delay() {
    let Some(net) = network("attempt_timeout_moves_on_before_the_attempt_delay") else {
        return;
    };
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(0))),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    let policy = FallbackPolicy::builder()
        .attempt_timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let report = contact(&net, policy).unwrap();
    let (a0, a1) = (&report.attempts[0], &report.attempts[1]);
    assert!(
        a0.outcome
            .to_string()
            .starts_with("cancelled: attempt timed out"),
        "{report}"
    );
    assert_near("timeout", a0.ended.unwrap().ms() - a0.started.ms(), 150.0);
    // The timed-out attempt was the latest, so the next starts at once (profile P4).
    assert_near("next start", a1.started.ms() - a0.started.ms(), 150.0);
    assert_near("winner", report.elapsed.ms() - a0.started.ms(), 170.0);
}

#[test]
fn https_record_hints_and_port_start_the_race_before_the_address_answers() {
    let Some(net) =
        network("https_record_hints_and_port_start_the_race_before_the_address_answers")
    else {
        return;
    };
    const ALT_PORT: u16 = 8443;
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            https: vec![
                HttpsSpec::service(1)
                    .alpn(["h2"])
                    .port(ALT_PORT)
                    .ipv4hint([server_v4(0)])
                    .ipv6hint([server_v6(0)]),
            ],
            aaaa_delay: Duration::from_millis(200),
            a_delay: Duration::from_millis(200),
            ..DnsZone::default()
        },
    );
    net.serve(
        SocketAddr::new(v6(0), ALT_PORT),
        ServerKind::Tls {
            alpn: vec![b"h2".to_vec()],
        },
    )
    .unwrap();
    net.set_rules(vec![Rule::delay(Match::Addr(v6(0)), half(RTT))]);
    let report = net.block_on_client(async {
        let c = connector(&net, FallbackPolicy::default());
        let conn = c.connect(&format!("https://{NAME}")).await.unwrap();
        assert_eq!(conn.alpn().map(ToString::to_string).as_deref(), Some("h2"));
        conn.into_parts().1
    });
    // HEv3 §4.2.1: the hints are used as answers; RFC 9460 §7.2: the record's port replaces 443.
    let first = &report.attempts[0];
    assert_eq!(first.route, SocketAddr::new(v6(0), ALT_PORT), "{report}");
    assert!(
        first.started.ms() < 100.0,
        "started on the hints, not the 200 ms answers\n{report}"
    );
    assert_eq!(report.winner, Some(first.id), "{report}");
    let https = report
        .queries
        .iter()
        .find(|q| q.kind == QueryKind::Https)
        .unwrap();
    let Some(AnswerReport::Https(records)) = &https.answer else {
        panic!("the HTTPS answer is missing from the report\n{report}");
    };
    assert_eq!(records.len(), 1, "{report}");
    assert_eq!(records[0].alpn, ["h2"]);
    assert_eq!(records[0].port, Some(ALT_PORT));
    assert_eq!(
        records[0].hints,
        [IpAddr::V6(server_v6(0)), IpAddr::V4(server_v4(0))]
    );
}

/// Serves TLS with h2 on `port` of each of `ips`.
fn serve_h2(net: &TestNet, ips: &[IpAddr], port: u16) {
    for &ip in ips {
        net.serve(
            SocketAddr::new(ip, port),
            ServerKind::Tls {
                alpn: vec![b"h2".to_vec()],
            },
        )
        .unwrap();
    }
}

#[test]
fn service_priority_groups_are_tried_in_order_before_the_origins_own_addresses() {
    // T38 on the wire: svca.test (priority 1) is blackholed on both families, svcb.test
    // (priority 2) works, and the origin's own addresses (no "." record) work but come last.
    let Some(net) =
        network("service_priority_groups_are_tried_in_order_before_the_origins_own_addresses")
    else {
        return;
    };
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            https: vec![
                HttpsSpec {
                    target: "svca.test".into(),
                    ..HttpsSpec::service(1)
                }
                .alpn(["h2"])
                .ipv6hint([server_v6(1)])
                .ipv4hint([server_v4(1)]),
                HttpsSpec {
                    target: "svcb.test".into(),
                    ..HttpsSpec::service(2)
                }
                .alpn(["h2"])
                .ipv6hint([server_v6(2)]),
            ],
            ..DnsZone::default()
        },
    );
    let zone = |aaaa, a| DnsZone {
        aaaa,
        a,
        ..DnsZone::default()
    };
    net.set_dns("svca.test", zone(vec![server_v6(1)], vec![server_v4(1)]));
    net.set_dns("svcb.test", zone(vec![server_v6(2)], vec![]));
    serve_h2(&net, &[v6(0), v4(0), v6(1), v4(1), v6(2)], 443);
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(1))),
        Rule::blackhole(Match::Addr(v4(1))),
        Rule::delay(Match::Addr(v6(2)), half(RTT)),
    ]);
    let report = net.block_on_client(async {
        let c = connector(&net, FallbackPolicy::default());
        let conn = c.connect(&format!("https://{NAME}")).await.unwrap();
        assert_eq!(conn.peer_addr(), SocketAddr::new(v6(2), 443));
        conn.into_parts().1
    });
    let routes: Vec<SocketAddr> = report.attempts.iter().map(|a| a.route).collect();
    assert_eq!(
        routes,
        [
            SocketAddr::new(v6(1), 443),
            SocketAddr::new(v4(1), 443),
            SocketAddr::new(v6(2), 443)
        ],
        "{report}"
    );
    let (a0, a1, a2) = (
        &report.attempts[0],
        &report.attempts[1],
        &report.attempts[2],
    );
    assert_near("svca's IPv4", a1.started.ms() - a0.started.ms(), 250.0);
    assert_near("svcb", a2.started.ms() - a0.started.ms(), 500.0);
    // The TargetNames' addresses were asked for, by name, and the report says so.
    let mut named: Vec<String> = report
        .queries
        .iter()
        .filter_map(|q| q.name.as_ref().map(|n| format!("{} {n}", q.kind)))
        .collect();
    named.sort();
    assert_eq!(
        named,
        [
            "A svca.test",
            "A svcb.test",
            "AAAA svca.test",
            "AAAA svcb.test"
        ],
        "{report}"
    );
    // Nothing ever went to the origin's own addresses.
    let syns = syn_offsets(&net);
    assert!(
        syns.iter().all(|(_, d)| d.ip() != v6(0) && d.ip() != v4(0)),
        "{syns:?}"
    );
}

#[test]
fn services_of_equal_priority_take_turns_going_first() {
    // T38b on the wire: two services at priority 1, each with a working hint and a port of
    // its own. Over 40 races (each with its own seed from the connector) each goes first
    // often; with a fixed connector seed the count is repeatable.
    let Some(net) = network("services_of_equal_priority_take_turns_going_first") else {
        return;
    };
    let (port_a, port_b) = (8443, 9443);
    net.set_dns(
        NAME,
        DnsZone {
            https: vec![
                HttpsSpec::service(1)
                    .alpn(["h2"])
                    .port(port_a)
                    .ipv6hint([server_v6(1)]),
                HttpsSpec::service(1)
                    .alpn(["h2"])
                    .port(port_b)
                    .ipv6hint([server_v6(2)]),
            ],
            ..DnsZone::default()
        },
    );
    serve_h2(&net, &[v6(1)], port_a);
    serve_h2(&net, &[v6(2)], port_b);
    let firsts = net.block_on_client(async {
        let c = connector(&net, FallbackPolicy::default());
        let mut firsts = Vec::new();
        for _ in 0..40 {
            let conn = c.connect(&format!("https://{NAME}")).await.unwrap();
            firsts.push(conn.report().attempts[0].route.port());
        }
        firsts
    });
    let a = firsts.iter().filter(|p| **p == port_a).count();
    assert!(
        (8..=32).contains(&a),
        "service A first in {a} of 40 races: {firsts:?}"
    );
}

#[test]
fn an_https_alias_is_followed_to_the_targets_service_and_port() {
    // RFC 9460 §2.4.2 on the wire: origin.test aliases to cdn.test, whose record names port
    // 8443; cdn.test's own AAAA answer carries the address.
    let Some(net) = network("an_https_alias_is_followed_to_the_targets_service_and_port") else {
        return;
    };
    const ALT_PORT: u16 = 8443;
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            https: vec![HttpsSpec {
                priority: 0,
                target: "cdn.test".into(),
                ..HttpsSpec::default()
            }],
            ..DnsZone::default()
        },
    );
    net.set_dns(
        "cdn.test",
        DnsZone {
            aaaa: vec![server_v6(3)],
            https: vec![HttpsSpec::service(1).alpn(["h2"]).port(ALT_PORT)],
            ..DnsZone::default()
        },
    );
    serve_h2(&net, &[v6(3)], ALT_PORT);
    serve_h2(&net, &[v6(0), v4(0)], 443);
    let report = net.block_on_client(async {
        let c = connector(&net, FallbackPolicy::default());
        let conn = c.connect(&format!("https://{NAME}")).await.unwrap();
        assert_eq!(conn.alpn().map(ToString::to_string).as_deref(), Some("h2"));
        conn.into_parts().1
    });
    assert_eq!(
        report.attempts[0].route,
        SocketAddr::new(v6(3), ALT_PORT),
        "{report}"
    );
    assert_eq!(report.winner, Some(report.attempts[0].id), "{report}");
    assert!(
        report
            .queries
            .iter()
            .any(|q| q.kind == QueryKind::Https && q.name.as_deref() == Some("cdn.test")),
        "{report}"
    );
}

/// One TLS contact with `https://origin.test` under `policy`.
fn tls_contact(net: &TestNet, policy: FallbackPolicy) -> Result<RaceReport, ConnectError> {
    net.block_on_client(async {
        let conn = connector(net, policy)
            .connect(&format!("https://{NAME}"))
            .await?;
        Ok(conn.into_parts().1)
    })
}

#[test]
fn an_https_answer_inside_the_resolution_delay_is_waited_for() {
    // T35 on the wire: the address answers come at once, the HTTPS answer 25 ms later; the
    // race waits for it (not the whole 50 ms Resolution Delay), then offers h2 and http/1.1.
    let Some(net) = network("an_https_answer_inside_the_resolution_delay_is_waited_for") else {
        return;
    };
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            https: vec![HttpsSpec::service(1).alpn(["h2"])],
            https_delay: Duration::from_millis(25),
            ..DnsZone::default()
        },
    );
    serve_h2(&net, &[v6(0)], TLS_PORT);
    let report = tls_contact(&net, FallbackPolicy::default()).unwrap();
    let first = &report.attempts[0];
    assert_eq!(first.route, SocketAddr::new(v6(0), TLS_PORT), "{report}");
    let addresses = answered_ms(&report, QueryKind::Aaaa).min(answered_ms(&report, QueryKind::A));
    let https = answered_ms(&report, QueryKind::Https);
    // Read against the race's own clock: the answers' times carry the DNS server's delays.
    assert!(
        https < addresses + 50.0,
        "the HTTPS answer came after the Resolution Delay, so this run tests nothing\n{report}"
    );
    assert_near("start at the HTTPS answer", first.started.ms(), https);
    // The load slack is as long as this test's margin, so the wrong timeline is ruled out
    // on its own: the race did not wait for the Resolution Delay to end.
    assert!(
        first.started.ms() < addresses + 50.0 - 1.0,
        "started at the end of the Resolution Delay, not on the HTTPS answer\n{report}"
    );
    assert!(first.plan.ends_with("[h2, http/1.1]"), "{report}");
    assert_eq!(
        report.alpn.as_ref().map(ToString::to_string).as_deref(),
        Some("h2")
    );
}

#[test]
fn hints_give_way_to_the_real_answers_and_a_withdrawn_hint_is_never_tried() {
    // T37 on the wire: the hints come at 10 ms, the real answers at 200 ms. The IPv4 hint
    // would answer, so trying it would show; it is withdrawn untried.
    let Some(net) =
        network("hints_give_way_to_the_real_answers_and_a_withdrawn_hint_is_never_tried")
    else {
        return;
    };
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            https: vec![
                HttpsSpec::service(1)
                    .alpn(["h2"])
                    .ipv6hint([server_v6(3)])
                    .ipv4hint([server_v4(3)]),
            ],
            https_delay: Duration::from_millis(10),
            aaaa_delay: Duration::from_millis(200),
            a_delay: Duration::from_millis(200),
            ..DnsZone::default()
        },
    );
    serve_h2(&net, &[v4(0), v4(3), v6(3)], TLS_PORT);
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(3))),
        Rule::blackhole(Match::Addr(v6(0))),
    ]);
    let report = tls_contact(&net, FallbackPolicy::default()).unwrap();
    let routes: Vec<IpAddr> = report.attempts.iter().map(|a| a.route.ip()).collect();
    assert_eq!(routes, [v6(3), v4(0)], "{report}");
    let https = answered_ms(&report, QueryKind::Https);
    assert_near("hint start", report.attempts[0].started.ms(), https);
    assert_near(
        "real IPv4 start, one attempt delay later",
        report.attempts[1].started.ms() - report.attempts[0].started.ms(),
        250.0,
    );
    assert_eq!(report.winner, Some(report.attempts[1].id), "{report}");
    assert!(
        net.syns().iter().all(|(_, d)| d.ip() != v4(3)),
        "{:?}",
        net.syns()
    );
}

#[test]
fn a_record_with_only_an_unsupported_alpn_is_ignored_on_the_wire() {
    // T39 on the wire: `alpn=h3 no-default-alpn` is nothing this TCP client speaks; the
    // record set counts as empty and its hint never sees a packet.
    let Some(net) = network("a_record_with_only_an_unsupported_alpn_is_ignored_on_the_wire") else {
        return;
    };
    let mut h3_only = HttpsSpec {
        target: "svc1.test".into(),
        ..HttpsSpec::service(1)
    }
    .alpn(["h3"])
    .ipv6hint([server_v6(2)]);
    h3_only.no_default_alpn = true;
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            https: vec![h3_only],
            ..DnsZone::default()
        },
    );
    serve_h2(&net, &[v6(0), v6(2)], TLS_PORT);
    let report = tls_contact(&net, FallbackPolicy::default()).unwrap();
    assert_eq!(report.attempts.len(), 1, "{report}");
    assert_eq!(report.attempts[0].route.ip(), v6(0), "{report}");
    assert!(net.syns().iter().all(|(_, d)| d.ip() != v6(2)));
    assert_eq!(
        net.dns_queries("svc1.test").aaaa,
        0,
        "an incompatible record's target"
    );
}

#[test]
fn an_ech_race_holds_the_client_hello_for_the_https_answer_and_never_falls_back_without_ech() {
    // T41 and T42 on the wire, as far as servers without ECH allow. The HTTPS answer comes
    // 120 ms after the address answers and carries `ech`. TCP starts at the Resolution Delay,
    // but no TLS byte (the first data segment is the ClientHello) leaves before the answer.
    // Both endpoints belong to that record, both reject ECH (these servers answer the outer
    // ClientHello, for the public name), and the race fails with that reason, with no
    // attempt without ECH.
    let Some(net) = network(
        "an_ech_race_holds_the_client_hello_for_the_https_answer_and_never_falls_back_without_ech",
    ) else {
        return;
    };
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            https: vec![
                HttpsSpec::service(1)
                    .alpn(["h2"])
                    .ech(fastfallback_testnet::ech_config_list(PUBLIC_NAME)),
            ],
            https_delay: Duration::from_millis(120),
            ..DnsZone::default()
        },
    );
    serve_h2(&net, &[v6(0), v4(0)], TLS_PORT);
    let t0 = std::time::Instant::now();
    let err = tls_contact(&net, FallbackPolicy::default()).unwrap_err();
    let ConnectError::Race(failure) = err else {
        panic!("a race failure, not {err:?}");
    };
    let report = &failure.report;
    assert!(
        failure
            .error
            .to_string()
            .contains("rejected Encrypted Client Hello"),
        "{}",
        failure.error
    );
    let plans: Vec<&str> = report.attempts.iter().map(|a| a.plan.as_str()).collect();
    assert_eq!(plans.len(), 2, "{report}");
    assert!(plans.iter().all(|p| p.ends_with("with ECH")), "{report}");
    // HEv3 §4.2: the Resolution Delay runs from the first positive address answer (both are).
    let addresses = answered_ms(report, QueryKind::Aaaa).min(answered_ms(report, QueryKind::A));
    assert_near(
        "TCP at the Resolution Delay",
        report.attempts[0].started.ms(),
        addresses + 50.0,
    );
    let https_at = answered_ms(report, QueryKind::Https);
    // The wire's clock and the race's are put on one scale by the first SYN, which leaves
    // when the first attempt starts (the wire adds well under a millisecond).
    let log = net.log();
    let wire_ms = |at: std::time::Instant| at.duration_since(t0).as_secs_f64() * 1e3;
    let first_syn = log
        .iter()
        .find(|e| e.is_client_syn())
        .map(|e| wire_ms(e.at))
        .expect("a SYN on the wire");
    let offset = first_syn - report.attempts[0].started.ms();
    let first_data = log
        .iter()
        .find(|e| {
            e.dir == fastfallback_testnet::Dir::ClientToServer
                && e.dst.port() == TLS_PORT
                && e.flags & fastfallback_testnet::flags::PSH != 0
        })
        .map(|e| wire_ms(e.at) - offset)
        .expect("a ClientHello on the wire");
    assert!(
        first_data >= https_at - 1.0,
        "ClientHello at {first_data:.1} ms, HTTPS answer at {https_at:.1} ms (race clock)\n{report}"
    );
}

#[test]
fn kernel_connectivity_is_read_from_the_callers_namespace() {
    let Some(net) = network("kernel_connectivity_is_read_from_the_callers_namespace") else {
        return;
    };
    // The client has 2001:db8:200::1 and 10.200.0.1 with routes to the servers: both count
    // (HEv3 §4.1), whatever the host's own namespace has.
    let c = net.client(fastfallback_net::detect_connectivity);
    assert!(c.v6 && c.v4, "{c:?}");
}

#[test]
fn link_local_literal_with_a_zone_connects_on_that_interface() {
    let Some(net) = network("link_local_literal_with_a_zone_connects_on_that_interface") else {
        return;
    };
    // A veth pair with a link-local address on one end, inside the test's client namespace
    // (it goes away with the namespace; this kernel has no dummy interfaces).
    net.client(|| {
        for args in [
            &["link", "add", "ll0", "type", "veth", "peer", "name", "ll1"][..],
            &["link", "set", "ll0", "up"],
            &["link", "set", "ll1", "up"],
            &["addr", "add", "fe80::1234/64", "dev", "ll0", "nodad"],
        ] {
            let status = std::process::Command::new("ip")
                .args(args)
                .status()
                .unwrap();
            assert!(status.success(), "ip {args:?}");
        }
    });
    net.block_on_client(async {
        let table = std::fs::read_to_string("/proc/thread-self/net/if_inet6").unwrap();
        let index = table
            .lines()
            .find(|l| l.ends_with(" ll0"))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(|i| u32::from_str_radix(i, 16).unwrap())
            .expect("ll0 has an IPv6 address");
        let ip: std::net::Ipv6Addr = "fe80::1234".parse().unwrap();
        let listener = tokio::net::TcpListener::bind(std::net::SocketAddrV6::new(ip, 0, 0, index))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let c = connector(&net, FallbackPolicy::default());
        // RFC 6874's form in a URI (%25 then the name), and a numeric zone.
        for origin in [
            format!("tcp://[fe80::1234%25ll0]:{port}"),
            format!("tcp://[fe80::1234%{index}]:{port}"),
        ] {
            let conn = c.connect(&origin).await.unwrap();
            let (_accepted, _) = listener.accept().await.unwrap();
            let SocketAddr::V6(peer) = conn.peer_addr() else {
                panic!("an IPv6 peer");
            };
            assert_eq!((*peer.ip(), peer.scope_id()), (ip, index), "{origin}");
        }
        // Without a zone the link-local literal is refused before any I/O.
        let err = c
            .connect(&format!("tcp://[fe80::1234]:{port}"))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("link-local address without a scope"),
            "{err}"
        );
    });
}

/// One exchange through `pool` to `origin`, started `delay` ms after `t0`: where its
/// connection came from, its race's report, and when it started (ms after `t0`). The
/// response must be the test server's "ok".
async fn call_after(
    pool: &Pool,
    origin: &Origin,
    t0: tokio::time::Instant,
    delay: u64,
) -> (Source, RaceReport, f64) {
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let started = t0.elapsed().as_secs_f64() * 1e3;
    let exchange = pool.exchange(origin).await.unwrap();
    let source = exchange.source();
    let report = exchange.report().cloned().unwrap();
    let request = http::Request::get("/").body(bytes::Bytes::new()).unwrap();
    let body = exchange.send(request).await.unwrap().into_body();
    assert_eq!(body.bytes().await.unwrap().as_ref(), b"ok");
    (source, report, started)
}

/// Two calls to one HTTP/2 origin over TLS, IPv6 blackholed, 10 ms RTT to IPv4; the second
/// call starts 50 ms after the first. Returns both exchanges' sources, reports and start
/// times, after checking each got `ok` back.
fn two_h2_calls(net: &TestNet, options: PoolOptions) -> [(Source, RaceReport, f64); 2] {
    serve_http_on_both(net, &[b"h2"]);
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(0))),
        Rule::delay(Match::Addr(v4(0)), Duration::from_millis(5)),
    ]);
    net.block_on_client(async {
        let pool = Pool::with_options(connector(net, FallbackPolicy::default()), options);
        let origin = pool.origin(&format!("https://{NAME}:{TLS_PORT}")).unwrap();
        let t0 = tokio::time::Instant::now();
        let (a, b) = tokio::join!(
            call_after(&pool, &origin, t0, 0),
            call_after(&pool, &origin, t0, 50)
        );
        assert_eq!(pool.stats().connections, 1);
        [a, b]
    })
}

/// The race of the second call is not told to wait (single flight off): it starts its own
/// IPv6 attempt, and ends on the first call's connection the moment that one is pooled,
/// before its own IPv4 attempt is due. The wire saw one IPv4 connection.
#[test]
fn second_race_ends_on_the_first_calls_h2_connection_when_it_is_pooled() {
    let Some(net) = network("second_race_ends_on_the_first_calls_h2_connection_when_it_is_pooled")
    else {
        return;
    };
    let options = PoolOptions {
        single_flight: false,
        ..PoolOptions::default()
    };
    let [(sa, ra, ta), (sb, rb, tb)] = two_h2_calls(&net, options);

    assert_eq!((sa, sb), (Source::New, Source::PooledMidRace), "{ra}\n{rb}");
    assert_eq!(rb.pooled, Some(1), "{rb}");
    // b raced: its IPv6 attempt started, and was cancelled when the pooled connection came.
    assert_eq!(rb.attempts_started(), 1, "{rb}");
    assert_eq!(rb.attempts[0].route, SocketAddr::new(v6(0), TLS_PORT));
    assert!(
        rb.attempts[0].outcome.to_string().starts_with("cancelled"),
        "{rb}"
    );
    // b ended when a's connection was pooled: a's race end, on the same clock.
    let (a_end, b_end) = (ta + ra.elapsed.ms(), tb + rb.elapsed.ms());
    assert_near("b's end, at a's", b_end, a_end);
    // IPv4 SYN at 250 (a's), TCP 10 ms, TLS 10 ms (several more in this unoptimised build):
    // a's race ends before b's own IPv4 start (50 + 250) was due, so that start never came.
    let a_race = ra.elapsed.ms();
    assert!(
        (269.0..300.0).contains(&a_race),
        "a's race: {a_race:.1} ms, expected 270 ms and before 300 ms\n{ra}"
    );
    let syns = syn_offsets(&net);
    let v4_syns: Vec<_> = syns.iter().filter(|(_, d)| d.is_ipv4()).collect();
    let v6_syns = syns.iter().filter(|(_, d)| d.is_ipv6()).count();
    assert_eq!(
        v4_syns.len(),
        1,
        "exactly one IPv4 connection on the wire: {syns:?}"
    );
    assert_eq!(v6_syns, 2, "one blackholed IPv6 SYN per race: {syns:?}");
    assert_eq!(net.accepted(SocketAddr::new(v4(0), TLS_PORT)), 1);
}

/// With single flight (the default) the second call's race waits for the first: it sends
/// nothing, and ends on the first call's connection when that one is pooled.
#[test]
fn waiting_call_sends_nothing_and_shares_the_first_calls_h2_connection() {
    let Some(net) = network("waiting_call_sends_nothing_and_shares_the_first_calls_h2_connection")
    else {
        return;
    };
    let [(sa, ra, ta), (sb, rb, tb)] = two_h2_calls(&net, PoolOptions::default());

    assert_eq!((sa, sb), (Source::New, Source::PooledMidRace), "{ra}\n{rb}");
    assert_eq!(rb.attempts_started(), 0, "{rb}");
    assert_eq!(rb.pooled, Some(1), "{rb}");
    let (a_end, b_end) = (ta + ra.elapsed.ms(), tb + rb.elapsed.ms());
    assert_near("b's end, at a's", b_end, a_end);
    let syns = syn_offsets(&net);
    assert_eq!(syns.len(), 2, "a's IPv6 and IPv4 SYNs only: {syns:?}");
    assert_eq!(net.accepted(SocketAddr::new(v4(0), TLS_PORT)), 1);
}

/// HTTP/1.1 over TLS on the test network: two calls in a row share one connection, and the
/// wire saw one SYN for them.
#[test]
fn http1_calls_in_a_row_reuse_one_connection_on_the_wire() {
    let Some(net) = network("http1_calls_in_a_row_reuse_one_connection_on_the_wire") else {
        return;
    };
    serve_http_on_both(&net, &[b"http/1.1"]);
    net.set_rules(vec![Rule::delay(
        Match::Addr(v6(0)),
        Duration::from_millis(5),
    )]);
    let sources = net.block_on_client(async {
        let pool = Pool::new(connector(&net, FallbackPolicy::default()));
        let origin = pool.origin(&format!("https://{NAME}:{TLS_PORT}")).unwrap();
        let mut sources = Vec::new();
        for _ in 0..2 {
            let exchange = pool.exchange(&origin).await.unwrap();
            sources.push(exchange.source());
            assert_eq!(exchange.protocol(), fastfallback_proto::Protocol::Http11);
            let request = http::Request::get("/").body(bytes::Bytes::new()).unwrap();
            let body = exchange.send(request).await.unwrap().into_body();
            assert_eq!(body.bytes().await.unwrap().as_ref(), b"ok");
        }
        sources
    });
    assert_eq!(sources, [Source::New, Source::Pool]);
    let syns = syn_offsets(&net);
    assert_eq!(syns.len(), 1, "one connection for both calls: {syns:?}");
    assert_eq!(syns[0].1, SocketAddr::new(v6(0), TLS_PORT));
}

/// With single flight, an HTTP/1 call that waited on the first call's connect cannot share
/// its connection while the first call uses it: it is released when the first race ends,
/// with what that race learned (the pool hands the race's lessons to the calls that waited).
/// So it leads with IPv4, where the first race won, instead of trying the blackholed IPv6
/// route again. The wire saw one IPv6 SYN, the first call's.
#[test]
fn a_released_http1_call_learns_from_the_race_it_waited_on_and_skips_the_dead_family() {
    let Some(net) = network(
        "a_released_http1_call_learns_from_the_race_it_waited_on_and_skips_the_dead_family",
    ) else {
        return;
    };
    serve_http_on_both(&net, &[b"http/1.1"]);
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(0))),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    let [(sa, ra), (sb, rb)] = net.block_on_client(async {
        let pool = Pool::new(connector(&net, FallbackPolicy::default()));
        let origin = pool.origin(&format!("https://{NAME}:{TLS_PORT}")).unwrap();
        let t0 = tokio::time::Instant::now();
        let (a, b) = tokio::join!(
            call_after(&pool, &origin, t0, 0),
            call_after(&pool, &origin, t0, 50)
        );
        [(a.0, a.1), (b.0, b.1)]
    });
    // The second call then either connects on its own or takes the first call's connection,
    // back in the pool after its exchange, whichever comes first: about the same time here.
    assert_eq!(sa, Source::New, "{ra}");
    assert!(
        matches!(sb, Source::New | Source::PooledMidRace),
        "{sb:?}\n{rb}"
    );
    // The first race fell back to IPv4 after the attempt delay.
    assert_eq!(ra.attempts_started(), 2, "{ra}");
    assert_eq!(ra.winning_attempt().unwrap().route.ip(), v4(0), "{ra}");
    // The released race knew that: one attempt, to IPv4.
    assert_eq!(rb.attempts_started(), 1, "{rb}");
    assert_eq!(rb.attempts[0].route.ip(), v4(0), "{rb}");
    let v6_syns = net.syns().iter().filter(|(_, d)| d.is_ipv6()).count();
    assert_eq!(
        v6_syns,
        1,
        "only the first race tried IPv6: {:?}",
        net.syns()
    );
}

#[test]
fn a_proxys_own_addresses_are_raced_so_a_blackholed_ipv6_proxy_falls_back_to_ipv4() {
    let Some(net) =
        network("a_proxys_own_addresses_are_raced_so_a_blackholed_ipv6_proxy_falls_back_to_ipv4")
    else {
        return;
    };
    const PROXY: &str = "proxy.test";
    net.set_dns(
        PROXY,
        DnsZone {
            aaaa: vec![server_v6(1)],
            a: vec![server_v4(1)],
            ..DnsZone::default()
        },
    );
    for ip in [v6(1), v4(1)] {
        net.serve(SocketAddr::new(ip, 1080), ServerKind::Socks5Proxy)
            .unwrap();
    }
    net.serve(
        SocketAddr::new(v4(0), TLS_PORT),
        ServerKind::Tls {
            alpn: vec![b"h2".to_vec()],
        },
    )
    .unwrap();
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(1))),
        Rule::delay(Match::Addr(v4(1)), half(RTT)),
    ]);
    // We resolve origin.test (the proxy's namespace has no resolver for it) and send the
    // address; the proxy's own name is raced like any origin's.
    let proxy = Proxy::socks5(Host::Name(PROXY.to_owned()), 1080).with_dns(ProxyDns::Local);
    let report = net.block_on_client(async {
        let c = connector_via(&net, FallbackPolicy::default(), Some(proxy));
        let conn = c.connect(&format!("https://{NAME}")).await.unwrap();
        assert_eq!(conn.alpn().map(ToString::to_string).as_deref(), Some("h2"));
        conn.into_parts().1
    });
    assert_eq!(report.attempts_started(), 2, "{report}");
    let (a0, a1) = (&report.attempts[0], &report.attempts[1]);
    assert_eq!(a0.route, SocketAddr::new(v6(1), 1080), "{report}");
    assert_eq!(a1.route, SocketAddr::new(v4(1), 1080), "{report}");
    assert_eq!(a1.proxy.as_deref(), Some("socks5 proxy proxy.test:1080"));
    assert!(
        a0.outcome
            .to_string()
            .starts_with("cancelled: lost the race"),
        "{report}"
    );
    assert_near("IPv4 proxy start", a1.started.ms() - a0.started.ms(), 250.0);
    assert_eq!(report.winner, Some(a1.id), "{report}");
}

/// An HTTP server offering `alpn` on the TLS port of the origin's IPv6 and IPv4 addresses.
fn serve_http_on_both(net: &TestNet, alpn: &[&[u8]]) {
    serve_h2_limits_on_both(net, alpn, None, 0);
}

/// [`serve_http_on_both`] with an HTTP/2 stream limit, and the first `goaway_first`
/// connections of each server answering with GOAWAY at once.
fn serve_h2_limits_on_both(
    net: &TestNet,
    alpn: &[&[u8]],
    max_streams: Option<u32>,
    goaway_first: usize,
) {
    for ip in [v6(0), v4(0)] {
        net.serve(
            SocketAddr::new(ip, TLS_PORT),
            ServerKind::Http {
                alpn: alpn.iter().map(|p| p.to_vec()).collect(),
                max_streams,
                goaway_first,
            },
        )
        .unwrap();
    }
}

/// `n` concurrent `GET path` calls through the pool: each one's status, or its error.
async fn concurrent_calls(
    pool: &Pool,
    origin: &Origin,
    path: &str,
    n: usize,
) -> Vec<Result<u16, String>> {
    let calls = (0..n).map(|_| {
        let (pool, uri) = (pool.clone(), format!("{origin}{path}"));
        async move {
            let request = http::Request::get(uri).body(bytes::Bytes::new()).unwrap();
            let response = pool.send(request).await.map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            response
                .into_body()
                .bytes()
                .await
                .map_err(|e| e.to_string())?;
            Ok(status)
        }
    });
    futures::future::join_all(calls).await
}

/// TCP connections the origin's two servers accepted.
fn origin_connections(net: &TestNet) -> usize {
    [v6(0), v4(0)]
        .into_iter()
        .map(|ip| net.accepted(SocketAddr::new(ip, TLS_PORT)))
        .sum()
}

/// Issue 21, item 1, on the wire (RTT 10 ms): a server allowing 10 concurrent streams
/// refuses the rest of a burst of 100 (RFC 9113 §5.1.2) sent before its SETTINGS arrived;
/// those were not processed (§8.7) and are sent again. Every call succeeds, on at most two
/// connections; then, with the limit learned, a second burst on a fresh pool's connection
/// is refused nothing either.
#[test]
fn hundred_calls_through_a_ten_stream_limit_all_succeed_on_the_wire() {
    let Some(net) = network("hundred_calls_through_a_ten_stream_limit_all_succeed_on_the_wire")
    else {
        return;
    };
    serve_h2_limits_on_both(&net, &[b"h2"], Some(10), 0);
    net.set_rules(vec![
        Rule::delay(Match::Addr(v6(0)), Duration::from_millis(5)),
        Rule::delay(Match::Addr(v4(0)), Duration::from_millis(5)),
    ]);
    net.block_on_client(async {
        let pool = Pool::new(connector(&net, FallbackPolicy::default()));
        let origin = pool.origin(&format!("https://{NAME}:{TLS_PORT}")).unwrap();

        let first = concurrent_calls(&pool, &origin, "/sleep/20", 100).await;
        assert!(
            first.iter().all(|r| r == &Ok(200)),
            "{:?}",
            first.iter().find(|r| r != &&Ok(200))
        );
        let after_first = origin_connections(&net);
        assert!((1..=2).contains(&after_first), "{after_first} connections");

        let second = concurrent_calls(&pool, &origin, "/sleep/20", 100).await;
        assert!(
            second.iter().all(|r| r == &Ok(200)),
            "{:?}",
            second.iter().find(|r| r != &&Ok(200))
        );
        assert!(origin_connections(&net) - after_first <= 1);
    });
}

/// Issue 21, item 2, on the wire: the origin's first connection answers GOAWAY naming stream 0
/// while 100 single-flight calls are queued on it. None was processed; all 100 complete on
/// one new connection.
#[test]
fn goaway_naming_no_stream_sends_queued_calls_to_one_new_connection_on_the_wire() {
    let Some(net) =
        network("goaway_naming_no_stream_sends_queued_calls_to_one_new_connection_on_the_wire")
    else {
        return;
    };
    serve_h2_limits_on_both(&net, &[b"h2"], None, 1);
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(0))),
        Rule::delay(Match::Addr(v4(0)), Duration::from_millis(5)),
    ]);
    net.block_on_client(async {
        let pool = Pool::new(connector(&net, FallbackPolicy::default()));
        let origin = pool.origin(&format!("https://{NAME}:{TLS_PORT}")).unwrap();

        let outcomes = concurrent_calls(&pool, &origin, "/", 100).await;

        assert!(
            outcomes.iter().all(|r| r == &Ok(200)),
            "{:?}",
            outcomes.iter().find(|r| r != &&Ok(200))
        );
        assert_eq!(net.accepted(SocketAddr::new(v4(0), TLS_PORT)), 2);
        assert_eq!(pool.stats().connections, 1);
    });
}

/// Sockets of the client namespace, by protocol: (TCP, UDP).
fn client_sockets_by_proto(net: &TestNet) -> (usize, usize) {
    let all = net.client_sockets().unwrap();
    let tcp = all.iter().filter(|s| s.proto == SocketProto::Tcp).count();
    (tcp, all.len() - tcp)
}

#[test]
fn dropping_connects_and_exchanges_at_random_instants_closes_their_sockets_within_a_turn() {
    let Some(net) = network(
        "dropping_connects_and_exchanges_at_random_instants_closes_their_sockets_within_a_turn",
    ) else {
        return;
    };
    serve_http_on_both(&net, &[b"h2", b"http/1.1"]);
    // IPv6 blackholed and AAAA late: a drop can land in DNS, in either attempt, in TLS, or
    // in the exchange.
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            aaaa_delay: Duration::from_millis(30),
            ..DnsZone::default()
        },
    );
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(0))),
        Rule::delay(Match::Addr(v4(0)), half(RTT)),
    ]);
    let mut seed = 0x0dd5_eed5_u64;
    // Log-uniform from 0.1 ms to 1.6 s, so drops land in DNS, in TCP, in TLS and in the
    // exchange alike, whether a contact takes 20 ms (route memory knows) or 400 ms.
    let mut instant = move || {
        seed = fastfallback_route::splitmix64(seed);
        let base = 100u64 << (seed % 15);
        Duration::from_micros(base + (seed >> 8) % base)
    };
    let (mut dropped, mut finished) = (0, 0);
    net.block_on_client(async {
        let connector = connector(&net, FallbackPolicy::default());
        let url = format!("https://{NAME}");
        for _ in 0..40 {
            let at = instant();
            let connect = connector.connect(&url);
            match tokio::time::timeout(at, connect).await {
                Err(_) => dropped += 1,
                Ok(conn) => {
                    finished += 1;
                    drop(conn);
                }
            }
            // One turn for the dropped futures' sockets to go.
            tokio::task::yield_now().await;
            let (tcp, udp) = client_sockets_by_proto(&net);
            assert_eq!(
                (tcp, udp),
                (0, 0),
                "after a drop at {at:?}: {:#?}",
                net.client_sockets()
            );
        }
        let pool = Pool::new(connector.clone());
        let origin = pool.origin(&format!("https://{NAME}")).unwrap();
        for round in 0..40 {
            let at = instant();
            let call = async {
                let exchange = pool.exchange(&origin).await?;
                let request = http::Request::get("/bytes/64")
                    .body(bytes::Bytes::new())
                    .unwrap();
                exchange.send(request).await?.into_body().bytes().await
            };
            match tokio::time::timeout(at, call).await {
                Err(_) => dropped += 1,
                Ok(_) => finished += 1,
            }
            tokio::task::yield_now().await;
            // What is left is what the pool keeps, and nothing else.
            let (tcp, udp) = client_sockets_by_proto(&net);
            let pooled = pool.stats().connections;
            assert_eq!(
                (tcp, udp),
                (pooled, 0),
                "round {round}, drop at {at:?}: {:#?}",
                net.client_sockets()
            );
            if round % 8 == 7 {
                pool.evict_all();
            }
        }
        pool.evict_all();
        drop(pool);
        tokio::task::yield_now().await;
    });
    assert!(
        dropped > 10 && finished > 10,
        "{dropped} dropped, {finished} finished"
    );
}
