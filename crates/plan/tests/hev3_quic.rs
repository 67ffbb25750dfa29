//! HEv3 §5.1, §6, §6.1 and §6.2: QUIC raced against TCP (T43, T44;
//! reference profile P11), on virtual time. QUIC attempts show as `quic <address>`.

mod common;
use common::*;

use fastfallback_plan::QuicOrder;
use fastfallback_proto::{Alpn, HttpsRecord, TransportKind};
use fastfallback_sim::{Run, Scenario};

const Q6A: &str = "quic 2001:db8::a";
const Q4A: &str = "quic 192.0.2.1";

/// `1 . alpn=…` for the origin itself.
fn rr(alpn: &[Alpn]) -> HttpsRecord {
    HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: alpn.to_vec(),
        ..Default::default()
    }
}

/// T43's set-up: a client that speaks h3, h2 and http/1.1; `1 . alpn=h3,h2`, AAAA [v6a] and
/// A [v4a], all at 10 ms; UDP dropped (the sim's default for QUIC); TCP+TLS connects in 50 ms
/// (20 + 30).
fn t43(order: QuicOrder) -> Scenario {
    t43_answers(order).ok_tls(V6A, 20, 30).ok_tls(V4A, 20, 30)
}

/// T43's client and DNS answers, with no TCP behaviours yet.
fn t43_answers(order: QuicOrder) -> Scenario {
    Scenario::https()
        .tune(|p| {
            p.quic = true;
            p.quic_order = order;
        })
        .https_rr(10, vec![rr(&[Alpn::H3, Alpn::H2])])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
}

/// The ALPN ids each started attempt offered, by transport.
fn alpn_lists(run: &Run) -> Vec<(TransportKind, Vec<Alpn>)> {
    run.attempts
        .iter()
        .map(|a| {
            let tls = a.plan.tls.as_ref().expect("https plans do TLS");
            (a.plan.transport, tls.alpn.clone())
        })
        .collect()
}

#[test]
fn udp_blocked_starts_tcp_one_attempt_delay_after_quic_on_the_same_address() {
    // T43, profile PI (the default): Q6@10, T6@260; TCP+TLS done @310; Q6 cancelled @310;
    // Q4 and T4 never start.
    let run = t43(QuicOrder::Interleaved).run();
    assert_eq!(
        run.starts(),
        at(&[(Q6A, 10), (V6A, 260)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won(), one(V6A, 310));
    assert_eq!(run.cancelled(), at(&[(Q6A, 310)]));
    assert_eq!(
        alpn_lists(&run),
        [
            (TransportKind::Quic, vec![Alpn::H3]),
            (TransportKind::Tcp, vec![Alpn::H2, Alpn::Http11]),
        ],
        "R-35: one ALPN list per transport, each with every id the client speaks on it"
    );
}

#[test]
fn udp_blocked_with_quic_first_tries_every_quic_endpoint_before_tcp() {
    // T43, profile CG: Q6@10, Q4@260, T6@510; Ok@560; Q6 and Q4 cancelled.
    let run = t43(QuicOrder::QuicFirst).run();
    assert_eq!(
        run.starts(),
        at(&[(Q6A, 10), (Q4A, 260), (V6A, 510)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won(), one(V6A, 560));
    assert_eq!(run.cancelled(), at(&[(Q6A, 560), (Q4A, 560)]));
    let lists = alpn_lists(&run);
    assert_eq!(lists[1], (TransportKind::Quic, vec![Alpn::H3]));
    assert_eq!(lists[2], (TransportKind::Tcp, vec![Alpn::H2, Alpn::Http11]));
}

#[test]
fn a_quic_handshake_that_completes_wins_before_any_tcp_attempt_starts() {
    // T44 (R-32: for QUIC, its handshake is the success): Q6@10, Ok(Q6)@40; no TCP attempt
    // ever starts, in either profile (the earliest TCP slot is 260 in PI, 510 in CG).
    for order in [QuicOrder::Interleaved, QuicOrder::QuicFirst] {
        let run = t43(order).quic_ok(V6A, 30).run();
        assert_eq!(
            run.starts(),
            at(&[(Q6A, 10)]),
            "{order:?}\n{}",
            run.timeline()
        );
        assert_eq!(run.won(), one(Q6A, 40), "{order:?}");
        let won = &run.attempts[0];
        assert_eq!(won.alpn, Some(Alpn::H3));
        assert!(
            run.tcp_connected().is_empty(),
            "a QUIC attempt has no TCP step"
        );
    }
}

#[test]
fn a_client_without_quic_never_starts_a_quic_attempt_for_an_h3_record() {
    // The default policy speaks TCP only: `alpn=h3,h2` gives TCP endpoints alone (T39's
    // variant), and the record's h3 does not reach the ClientHello.
    let run = t43(QuicOrder::Interleaved)
        .tune(|p| p.quic = false)
        .quic_ok(V6A, 1)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10)]), "{}", run.timeline());
    assert_eq!(run.won(), one(V6A, 60));
    assert_eq!(
        alpn_lists(&run),
        [(TransportKind::Tcp, vec![Alpn::H2, Alpn::Http11])]
    );
}

#[test]
fn an_h3_only_record_gives_quic_endpoints_and_the_origin_addresses_follow_without_svcb() {
    // `1 . alpn=h3 no-default-alpn`: compatible only for a QUIC client, and only over QUIC.
    // Its endpoints (v6a, v4a over QUIC) form the first group; the origin's own addresses
    // over TCP follow as the connection without SVCB (RFC 9460 §3).
    let mut h3_only = rr(&[Alpn::H3]);
    h3_only.no_default_alpn = true;
    let run = Scenario::https()
        .tune(|p| p.quic = true)
        .https_rr(10, vec![h3_only])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .ok_tls(V6A, 20, 30)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(Q6A, 10), (Q4A, 260), (V6A, 510)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won(), one(V6A, 560));
    assert!(run.attempts[2].plan.without_svcb);
    assert!(run.attempts[..2].iter().all(|a| !a.plan.without_svcb));
}

#[test]
fn a_service_with_ech_is_reached_over_tcp_only_so_never_without_ech() {
    // ECH over QUIC is not built: a QUIC attempt to a service with an ECH configuration would
    // send the origin's name in clear. The service's TCP endpoint carries its ECH instead.
    let mut r = rr(&[Alpn::H3, Alpn::H2]);
    r.ech = Some(Arc::from(&b"an ECHConfigList"[..]));
    let run = Scenario::https()
        .tune(|p| p.quic = true)
        .https_rr(10, vec![r])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .ok_tls(V6A, 20, 30)
        .quic_ok(V6A, 1)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10)]), "{}", run.timeline());
    let tls = run.attempts[0].plan.tls.as_ref().expect("TLS");
    assert!(tls.ech.is_some());
    assert_eq!(run.attempts[0].plan.transport, TransportKind::Tcp);
}

#[test]
fn a_failed_quic_handshake_starts_tcp_at_once() {
    // R-30 (profile P4): when the latest attempt fails, the next starts at that instant; a
    // QUIC attempt is no different. QUIC is refused at 15 (an ICMP port unreachable, say).
    let run = t43(QuicOrder::Interleaved)
        .behave_quic(
            V6A,
            fastfallback_sim::Behaviour::Fail {
                after: 5,
                kind: fastfallback_proto::AttemptErrorKind::Unreachable,
            },
        )
        .run();
    assert_eq!(
        run.starts(),
        at(&[(Q6A, 10), (V6A, 15)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.failures(), at(&[(Q6A, 15)]));
    assert_eq!(run.won(), one(V6A, 65));
}

// ---- Broken-QUIC memory (HEv3 §5.3, R-21; Chromium's broken alternative services) ----

use fastfallback_proto::Instant;
use fastfallback_route::{LessonKind, QUIC_BROKEN_FOR, RouteDatabase, RouteMemory};
use std::sync::Arc;

/// T43 (profile PI) sharing route memory, started at `start` ms.
fn t43_remembering(db: &Arc<RouteDatabase>, start: u64) -> Scenario {
    t43(QuicOrder::Interleaved)
        .memory(db.clone())
        .starting_at(start)
}

fn quic_lessons(run: &Run) -> Vec<LessonKind> {
    run.lessons
        .iter()
        .map(|l| l.kind)
        .filter(|k| k.is_about_quic())
        .collect()
}

const BROKEN_MS: u64 = QUIC_BROKEN_FOR.as_millis() as u64;

#[test]
fn quic_that_loses_to_tcp_makes_the_next_race_lead_with_tcp_on_the_same_address() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let first = t43_remembering(&db, 0).run();
    assert_eq!(first.starts(), at(&[(Q6A, 10), (V6A, 260)]));
    assert_eq!(quic_lessons(&first), [LessonKind::QuicBroken]);
    // UDP that did not answer taught the route nothing: no failure, no lower bound on its
    // RTT (which would have demoted IPv6 over TCP too). The one route lesson is TCP's RTT.
    let v6a = format!("[{V6A}]:443").parse().unwrap();
    let route_lessons: Vec<_> = first
        .lessons
        .iter()
        .filter(|l| !l.kind.is_about_quic())
        .collect();
    assert_eq!(route_lessons.len(), 1, "{route_lessons:?}");
    assert_eq!(route_lessons[0].target, v6a);
    assert!(matches!(
        route_lessons[0].kind,
        LessonKind::Connected { .. }
    ));

    // The next race: TCP on v6a leads and wins one TCP+TLS later; QUIC would follow one
    // attempt delay behind it, so it never starts.
    let second = t43_remembering(&db, 1_000).run();
    assert_eq!(
        second.starts(),
        at(&[(V6A, 1_010)]),
        "{}",
        second.timeline()
    );
    assert_eq!(second.won(), one(V6A, 1_060));
    assert_eq!(second.final_order[..2], [v6a, v6a]);
    assert_eq!(second.attempts[0].plan.transport, TransportKind::Tcp);
    assert!(
        quic_lessons(&second).is_empty(),
        "QUIC was not tried, so nothing is learned of it"
    );
}

#[test]
fn a_race_that_ignores_history_still_leads_with_tcp_while_quic_is_broken() {
    // `explore_one_in` (seed 6 is such a race) orders routes and families as a first contact
    // would, but not QUIC: its broken period is its own way back, and exploring it would
    // cost a UDP-blocked network one attempt delay.
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = t43_remembering(&db, 0).run();
    let explorer = t43_remembering(&db, 1_000).seed(6).run();
    assert!(explorer.history_ignored);
    assert_eq!(
        explorer.starts(),
        at(&[(V6A, 1_010)]),
        "{}",
        explorer.timeline()
    );
}

#[test]
fn a_broken_quic_still_follows_tcp_so_a_dead_tcp_path_is_not_fatal() {
    // QUIC is remembered broken, but this time TCP to v6a is blackholed and QUIC works: the
    // race tries QUIC one attempt delay after TCP (100 ms: the first race measured the
    // route's RTT, and the delay adapts to it), and QUIC wins.
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = t43_remembering(&db, 0).run();
    let run = t43_answers(QuicOrder::Interleaved)
        .memory(db.clone())
        .starting_at(1_000)
        .drop(V6A)
        .ok_tls(V4A, 20, 30)
        .quic_ok(V6A, 30)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 1_010), (Q6A, 1_110)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won(), one(Q6A, 1_140));
    assert_eq!(quic_lessons(&run), [LessonKind::QuicWorked]);
    // The success forgot the broken record: the race after leads with QUIC again.
    let after = t43_remembering(&db, 2_000).quic_ok(V6A, 30).run();
    assert_eq!(after.starts(), at(&[(Q6A, 2_010)]), "{}", after.timeline());
}

#[test]
fn quic_is_tried_first_again_when_its_broken_period_ends_and_a_second_loss_doubles_it() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = t43_remembering(&db, 0).run(); // broken at 310 ms, for 5 minutes
    let during = t43_remembering(&db, 310 + BROKEN_MS - 20).run();
    assert_eq!(during.attempts[0].plan.transport, TransportKind::Tcp);
    // Once the period has ended, QUIC leads again, loses again, and is kept back twice as
    // long: still broken just before 10 minutes, not after. (TCP follows 100 ms behind, not
    // 250: the route's RTT is known now, and the attempt delay adapts to it.)
    let start = 310 + BROKEN_MS;
    let again = t43_remembering(&db, start).run();
    assert_eq!(
        again.starts(),
        at(&[(Q6A, start + 10), (V6A, start + 110)]),
        "{}",
        again.timeline()
    );
    assert_eq!(quic_lessons(&again), [LessonKind::QuicBroken]);
    let lost_at = start + 160;
    assert_eq!(again.won(), one(V6A, lost_at));
    let origin = fastfallback_route::Address::parse("https://example.com").unwrap();
    let view = |t| {
        db.view(
            fastfallback_route::NetworkId(0),
            &origin,
            Instant::from_millis(t),
        )
    };
    let t = lost_at + 2 * BROKEN_MS;
    assert!(view(t - 1).is_quic_broken(Instant::from_millis(t - 1)));
    assert!(!view(t).is_quic_broken(Instant::from_millis(t)));
}

#[test]
fn a_quic_attempt_started_after_the_tcp_winner_says_nothing_about_quic() {
    // Broken QUIC follows TCP; TCP to v6a is slow (its TCP takes 300 ms), so QUIC starts
    // one (adapted) attempt delay later, at 1 110, and TCP to v4a at 1 210. QUIC is still in
    // its handshake (UDP dropped) when the first TCP attempt wins at 1 340. QUIC started
    // after the winner: it had no fair chance, and the record is not lengthened.
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = t43_remembering(&db, 0).run();
    let run = t43_answers(QuicOrder::Interleaved)
        .memory(db)
        .starting_at(1_000)
        .ok_tls(V6A, 300, 30)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 1_010), (Q6A, 1_110), (V4A, 1_210)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won(), one(V6A, 1_340));
    assert!(quic_lessons(&run).is_empty(), "{:?}", run.lessons);
}
