//! Tests of the wire: classification, rules and their actions, and the log.

use super::*;
use crate::packet::tests::{tcp_packet, udp_packet};
use crate::packet::{ACK, FIN, PSH, RST, SYN};

const C4: &str = "10.200.0.1:40000";
const S4: &str = "10.201.0.10:443";
const C6: &str = "[2001:db8:200::1]:40000";
const S6: &str = "[2001:db8:201::a]:443";

fn sa(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn engine(rules: Vec<Rule>) -> Engine {
    let shared = Arc::new(Shared::default());
    *lock(&shared.rules) = rules;
    Engine::new(shared, 42)
}

/// Everything due by `until`, with the time it became due.
fn drain(e: &mut Engine, until: Instant) -> Vec<(Instant, Side, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(due) = e.next_due() {
        if due > until {
            break;
        }
        let (side, pkt) = e.pop_due(due).expect("due");
        out.push((due, side, pkt));
    }
    out
}

#[test]
fn matches_by_family_address_and_prefix() {
    let v4: IpAddr = "10.201.0.10".parse().expect("ip");
    let v6: IpAddr = "2001:db8:201::a".parse().expect("ip");
    assert!(Match::Any.matches(v4) && Match::Any.matches(v6));
    assert!(Match::V4.matches(v4) && !Match::V4.matches(v6));
    assert!(Match::V6.matches(v6) && !Match::V6.matches(v4));
    assert!(Match::Addr(v4).matches(v4) && !Match::Addr(v4).matches(v6));
    let p4 = Match::Prefix("10.201.0.0".parse().expect("ip"), 16);
    assert!(p4.matches(v4) && !p4.matches("10.202.0.1".parse().expect("ip")));
    assert!(!p4.matches(v6));
    let p6 = Match::Prefix("2001:db8:201::".parse().expect("ip"), 48);
    assert!(p6.matches(v6) && !p6.matches("2001:db8:202::a".parse().expect("ip")));
    assert!(Match::Prefix(v4, 0).matches("1.2.3.4".parse().expect("ip")));
    assert!(Match::Prefix(v4, 200).matches(v4));
}

#[test]
fn first_matching_rule_wins_and_port_narrows() {
    let mut e = engine(vec![
        Rule::blackhole(Match::V4).port(80),
        Rule::delay(Match::V4, ms(10)),
        Rule::rst(Match::Any),
    ]);
    let t0 = Instant::now();
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa(S4), 1, 0, SYN, &[]),
    );
    let log = lock(&e.shared.log).clone();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].rule, Some(1));
    assert_eq!(log[0].verdict, Verdict::Delivered);
    let out = drain(&mut e, t0 + ms(100));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, t0 + ms(10));
    assert_eq!(out[0].1, Side::Server);

    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa("10.201.0.10:80"), 1, 0, SYN, &[]),
    );
    assert_eq!(lock(&e.shared.log)[1].verdict, Verdict::Dropped);
    assert_eq!(lock(&e.shared.log)[1].rule, Some(0));
    assert!(drain(&mut e, t0 + ms(100)).is_empty());
}

#[test]
fn rst_is_answered_after_both_delays_and_logged_twice() {
    let mut e = engine(vec![Rule::rst(Match::V6).c2s(ms(7)).s2c(ms(5))]);
    let t0 = Instant::now();
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C6), sa(S6), 99, 0, SYN, &[]),
    );
    let out = drain(&mut e, t0 + ms(100));
    assert_eq!(out.len(), 1);
    let (due, side, pkt) = &out[0];
    assert_eq!((*due, *side), (t0 + ms(12), Side::Client));
    let p = packet::parse(pkt).expect("parses");
    assert_eq!(p.tcp.map(|t| (t.flags, t.ack)), Some((RST | ACK, 100)));
    let log = lock(&e.shared.log).clone();
    assert_eq!(log[0].verdict, Verdict::Answered(Action::Rst));
    assert_eq!(log[1].verdict, Verdict::Synthesized(Action::Rst));
    assert_eq!((log[1].src, log[1].dst), (sa(S6), sa(C6)));
}

#[test]
fn blackhole_drops_only_client_to_server() {
    let mut e = engine(vec![Rule::blackhole(Match::Any)]);
    let t0 = Instant::now();
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa(S4), 1, 0, SYN, &[]),
    );
    e.handle(
        t0,
        Dir::ServerToClient,
        &tcp_packet(sa(S4), sa(C4), 1, 2, FIN | ACK, &[]),
    );
    let out = drain(&mut e, t0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1, Side::Client);
}

#[test]
fn a_udp_rule_blackholes_datagrams_and_lets_tcp_to_the_same_port_through() {
    let mut e = engine(vec![Rule::blackhole(Match::Any).port(443).udp()]);
    let t0 = Instant::now();
    e.handle(
        t0,
        Dir::ClientToServer,
        &udp_packet(sa(C4), sa(S4), b"a QUIC Initial"),
    );
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa(S4), 1, 0, SYN, &[]),
    );
    let out = drain(&mut e, t0);
    assert_eq!(out.len(), 1, "only the SYN is delivered");
    assert_eq!(out[0].1, Side::Server);
    assert_eq!(packet::parse(&out[0].2).unwrap().proto, packet::PROTO_TCP);
}

#[test]
fn drop_data_passes_handshake_and_drops_payload_both_ways() {
    let mut e = engine(vec![Rule::stall(Match::Any, ms(1))]);
    let t0 = Instant::now();
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa(S4), 1, 0, SYN, &[]),
    );
    e.handle(
        t0,
        Dir::ServerToClient,
        &tcp_packet(sa(S4), sa(C4), 5, 2, SYN | ACK, &[]),
    );
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa(S4), 2, 6, ACK, &[]),
    );
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa(S4), 2, 6, ACK | PSH, b"hello"),
    );
    e.handle(
        t0,
        Dir::ServerToClient,
        &tcp_packet(sa(S4), sa(C4), 6, 2, ACK | PSH, b"hi"),
    );
    assert_eq!(drain(&mut e, t0 + ms(10)).len(), 3);
}

#[test]
fn icmp_answers_client_packets_but_not_server_ones() {
    let mut e = engine(vec![Rule::icmp_admin(Match::Any)]);
    let t0 = Instant::now();
    e.handle(
        t0,
        Dir::ClientToServer,
        &udp_packet(sa(C4), sa("10.201.0.53:53"), b"q"),
    );
    e.handle(
        t0,
        Dir::ServerToClient,
        &udp_packet(sa("10.201.0.53:53"), sa(C4), b"a"),
    );
    let out = drain(&mut e, t0);
    assert_eq!(out.len(), 2);
    let icmp = out
        .iter()
        .find_map(|(_, _, pkt)| packet::parse(pkt).filter(|p| p.proto == 1))
        .expect("an ICMP answer");
    assert_eq!(icmp.dst, sa(C4).ip());
}

#[test]
fn jitter_never_reorders_a_flow() {
    let mut e = engine(vec![Rule::delay(Match::Any, ms(20)).jitter(ms(15))]);
    let t0 = Instant::now();
    for i in 0..200u32 {
        let at = t0 + Duration::from_micros(u64::from(i) * 100);
        e.handle(
            at,
            Dir::ClientToServer,
            &tcp_packet(sa(C4), sa(S4), i, 0, ACK, b"x"),
        );
    }
    let out = drain(&mut e, t0 + ms(1000));
    assert_eq!(out.len(), 200);
    let seqs: Vec<u32> = out
        .iter()
        .map(|(_, _, pkt)| packet::parse(pkt).and_then(|p| p.tcp).expect("tcp").seq)
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let spread = out.last().expect("some").0 - out[0].0;
    assert!(spread > ms(10), "jitter had an effect: {spread:?}");
}

#[test]
fn loss_is_seeded_and_roughly_the_asked_rate() {
    let run = || {
        let mut e = engine(vec![Rule::delay(Match::Any, ms(0)).loss(0.25)]);
        let t0 = Instant::now();
        for i in 0..2000u32 {
            e.handle(
                t0,
                Dir::ClientToServer,
                &tcp_packet(sa(C4), sa(S4), i, 0, ACK, b"x"),
            );
        }
        drain(&mut e, t0)
            .iter()
            .map(|(_, _, p)| packet::parse(p).and_then(|p| p.tcp).expect("tcp").seq)
            .collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run(), "same seed, same losses");
    assert!((1400..1600).contains(&a.len()), "{} of 2000 kept", a.len());
}

#[test]
fn absurd_delays_do_not_panic() {
    let t0 = Instant::now();
    for rule in [
        Rule::delay(Match::Any, Duration::MAX).jitter(Duration::MAX),
        Rule::rst(Match::Any).one_way(Duration::MAX),
    ] {
        let mut e = engine(vec![rule]);
        e.handle(
            t0,
            Dir::ClientToServer,
            &tcp_packet(sa(C4), sa(S4), 1, 0, SYN, &[]),
        );
        assert!(e.next_due().is_some_and(|due| due > t0 + ms(1000)));
    }
}

#[test]
fn unparsable_packets_pass_at_once() {
    let mut e = engine(vec![Rule::blackhole(Match::Any)]);
    let t0 = Instant::now();
    e.handle(t0, Dir::ClientToServer, &[0xff, 1, 2]);
    e.handle(t0, Dir::ClientToServer, &[]);
    assert_eq!(drain(&mut e, t0).len(), 2);
}

#[test]
fn client_syn_filter_ignores_syn_ack_and_rst_and_only_a_flows_first_data_is_logged() {
    let mut e = engine(vec![]);
    let t0 = Instant::now();
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa(S4), 1, 0, SYN, &[]),
    );
    e.handle(
        t0,
        Dir::ServerToClient,
        &tcp_packet(sa(S4), sa(C4), 1, 2, SYN | ACK, &[]),
    );
    e.handle(
        t0,
        Dir::ClientToServer,
        &tcp_packet(sa(C4), sa(S4), 1, 0, RST, &[]),
    );
    for _ in 0..3 {
        e.handle(
            t0,
            Dir::ClientToServer,
            &tcp_packet(sa(C4), sa(S4), 1, 0, ACK, b"data"),
        );
    }
    let log = lock(&e.shared.log).clone();
    assert_eq!(log.len(), 4, "only the flow's first data segment is logged");
    assert_eq!(log[3].flags, ACK);
    assert_eq!(log.iter().filter(|e| e.is_client_syn()).count(), 1);
}

proptest::proptest! {
    #[test]
    fn engine_survives_arbitrary_packets(
        pkts in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..120), 1..20),
        action in 0usize..7,
    ) {
        let actions = [Action::Pass, Action::Blackhole, Action::Rst, Action::IcmpPort,
                       Action::IcmpHost, Action::IcmpAdmin, Action::DropData];
        let mut e = engine(vec![Rule::new(Match::Any, actions[action]).loss(0.1).jitter(ms(1))]);
        let t0 = Instant::now();
        for (i, mut pkt) in pkts.into_iter().enumerate() {
            if let Some(b) = pkt.first_mut() {
                *b = if i % 2 == 0 { 0x45 } else { 0x60 };
            }
            let dir = if i % 3 == 0 { Dir::ServerToClient } else { Dir::ClientToServer };
            e.handle(t0, dir, &pkt);
        }
        drain(&mut e, t0 + ms(10));
    }
}
