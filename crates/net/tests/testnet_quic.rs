//! QUIC against TCP on the test network (the `quic` feature; root): T44 and T43 on the wire
//! with a quinn server beside the TLS one, UDP slower than TCP, broken-QUIC memory on the
//! next contact, and the UDP socket of a cancelled QUIC attempt closed.
//! Run: `cargo test -p fastfallback-net --features quic --test testnet_quic`.
#![cfg(feature = "quic")]

use std::net::SocketAddr;
use std::time::Duration;

use fastfallback_net::{Connector, FallbackPolicy, RaceReport};
use fastfallback_proto::Alpn;
use fastfallback_testkit::Millis;
use fastfallback_testkit::wire::*;
use fastfallback_testnet::{
    DnsZone, HttpsSpec, Match, Rule, ServerKind, SocketProto, TestNet, server_v4, server_v6,
};

/// `origin.test` with `1 . alpn=h3,h2`, a TLS server (h2) and a QUIC server (h3) on port 443
/// of server 0 of each family, and a wire with [`RTT`] to both.
fn quic_network(test: &str) -> Option<Net> {
    let net = network(test)?;
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            https: vec![HttpsSpec::service(1).alpn(["h3", "h2"])],
            ..DnsZone::default()
        },
    );
    for ip in [v6(0), v4(0)] {
        let at = SocketAddr::new(ip, TLS_PORT);
        let alpn = vec![b"h2".to_vec()];
        net.serve(at, ServerKind::Tls { alpn }).unwrap();
        let alpn = vec![b"h3".to_vec()];
        net.serve(at, ServerKind::Quic { alpn }).unwrap();
    }
    Some(net)
}

fn delayed(rules: Vec<Rule>) -> Vec<Rule> {
    let mut all = rules;
    all.extend([v6(0), v4(0)].map(|ip| Rule::delay(Match::Addr(ip), half(RTT))));
    all
}

fn quic_connector(net: &TestNet) -> Connector {
    connector(net, FallbackPolicy::builder().quic(true).build().unwrap())
}

/// One contact; the winner's ALPN and the report.
async fn contact(c: &Connector) -> (Option<Alpn>, RaceReport) {
    let conn = c.connect(&format!("https://{NAME}")).await.unwrap();
    (conn.alpn().cloned(), conn.into_parts().1)
}

fn is_quic(a: &fastfallback_net::AttemptReport) -> bool {
    a.plan.starts_with("quic ")
}

#[test]
fn t44_on_the_wire_quic_wins_in_one_round_trip_and_no_tcp_starts() {
    let Some(net) = quic_network("t44_on_the_wire_quic_wins_in_one_round_trip_and_no_tcp_starts")
    else {
        return;
    };
    net.set_rules(delayed(Vec::new()));
    let (alpn, report) = net.block_on_client(async { contact(&quic_connector(&net)).await });
    assert_eq!(alpn, Some(Alpn::H3), "{report}");
    assert_eq!(report.attempts.len(), 1, "{report}");
    let quic = &report.attempts[0];
    assert!(is_quic(quic), "{report}");
    assert_eq!(quic.route, SocketAddr::new(v6(0), TLS_PORT), "{report}");
    // One round trip: the client's Initial out, the server's Initial and Handshake back.
    let handshake = quic.ended.unwrap().ms() - quic.started.ms();
    assert_near("QUIC handshake", handshake, RTT.ms());
    assert!(net.syns().is_empty(), "no TCP attempt: {:?}", net.syns());
}

#[test]
fn t43_on_the_wire_udp_blackholed_starts_tcp_one_attempt_delay_later_then_leads_with_it() {
    let Some(net) = quic_network(
        "t43_on_the_wire_udp_blackholed_starts_tcp_one_attempt_delay_later_then_leads_with_it",
    ) else {
        return;
    };
    net.set_rules(delayed(vec![
        Rule::blackhole(Match::Any).port(TLS_PORT).udp(),
    ]));
    let (first, second) = net.block_on_client(async {
        let c = quic_connector(&net);
        let first = contact(&c).await;
        // The cancelled QUIC attempt's UDP socket closes once quinn's endpoint task runs:
        // wait for it (a bounded wait, not a timing assertion).
        let mut udp = usize::MAX;
        for _ in 0..100 {
            udp = net
                .client_sockets()
                .unwrap()
                .iter()
                .filter(|s| s.proto == SocketProto::Udp)
                .count();
            if udp == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            udp,
            0,
            "the cancelled QUIC attempt's UDP socket is still open: {:?}",
            net.client_sockets()
        );
        (first, contact(&c).await)
    });
    let (alpn, report) = first;
    assert_eq!(alpn, Some(Alpn::H2), "{report}");
    let (quic, tcp) = (&report.attempts[0], &report.attempts[1]);
    assert!(is_quic(quic) && !is_quic(tcp), "{report}");
    assert_eq!(
        quic.route.ip(),
        tcp.route.ip(),
        "QUIC leads on the same address (PI)"
    );
    assert_near(
        "TCP after QUIC",
        tcp.started.ms() - quic.started.ms(),
        FallbackPolicy::default().attempt_delay.ms(),
    );
    assert_near(
        "TCP and TLS",
        report.elapsed.ms() - tcp.started.ms(),
        2.0 * RTT.ms(),
    );
    // QUIC is remembered broken: the next contact starts TCP first and is done in TCP's
    // time, QUIC's turn never comes.
    let (alpn, report) = second;
    assert_eq!(alpn, Some(Alpn::H2), "{report}");
    assert_eq!(report.attempts.len(), 1, "{report}");
    assert!(!is_quic(&report.attempts[0]), "{report}");
    assert_near(
        "TCP and TLS, first",
        report.elapsed.ms() - report.attempts[0].started.ms(),
        2.0 * RTT.ms(),
    );
}

#[test]
fn udp_slower_than_tcp_loses_to_tcp_and_is_then_remembered_broken() {
    let Some(net) = quic_network("udp_slower_than_tcp_loses_to_tcp_and_is_then_remembered_broken")
    else {
        return;
    };
    // UDP to the origin takes 300 ms each way; TCP 10.
    net.set_rules(delayed(vec![
        Rule::delay(Match::Any, Duration::from_millis(300))
            .port(TLS_PORT)
            .udp(),
    ]));
    let (first, second) = net.block_on_client(async {
        let c = quic_connector(&net);
        (contact(&c).await, contact(&c).await)
    });
    let (alpn, report) = first;
    assert_eq!(
        alpn,
        Some(Alpn::H2),
        "TCP wins at ~290 ms, QUIC needs 600\n{report}"
    );
    assert!(is_quic(&report.attempts[0]), "{report}");
    assert!(
        report.attempts[0].outcome.to_string().contains("cancelled"),
        "{report}"
    );
    let (alpn, report) = second;
    assert_eq!(alpn, Some(Alpn::H2), "{report}");
    assert!(!is_quic(&report.attempts[0]), "TCP leads\n{report}");
}
