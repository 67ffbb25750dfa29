//! Alt-Svc in the race (RFC 7838; HEv3 §6.2, RFC 9460 §9.3, R-37), on virtual time: an
//! origin's HTTP/3 alternatives, kept by route memory from its responses, give QUIC
//! endpoints on its own addresses when no HTTPS record speaks for it, and nothing when one
//! does.

mod common;
use common::*;

use std::sync::Arc;

use fastfallback_proto::{Alpn, HttpsRecord, Instant, TransportKind, parse_alt_svc};
use fastfallback_route::{Address, NetworkId, RouteDatabase, RouteMemory};
use fastfallback_sim::Scenario;

const Q6A: &str = "quic 2001:db8::a";

/// Route memory that learned `value` from `https://example.com` at 0 ms.
fn learned(value: &str) -> Arc<RouteDatabase> {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let origin = Address::parse("https://example.com").unwrap();
    db.learn_alt_svc(NetworkId(0), &origin, &parse_alt_svc(value), Instant::ZERO);
    db
}

/// A QUIC client, starting at 1 000 ms; the origin has no HTTPS record (NODATA at 10 ms),
/// AAAA [v6a] and A [v4a] at 10; TCP+TLS to v6a takes 50 ms, QUIC to v6a 30.
fn origin(db: &Arc<RouteDatabase>) -> Scenario {
    answers(db).https_rr(10, vec![]).ok_tls(V6A, 20, 30)
}

/// [`origin`]'s client and addresses, with no HTTPS answer and no TCP behaviour yet.
fn answers(db: &Arc<RouteDatabase>) -> Scenario {
    Scenario::https()
        .tune(|p| p.quic = true)
        .memory(db.clone())
        .starting_at(1_000)
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .quic_ok(V6A, 30)
}

#[test]
fn an_alt_svc_h3_alternative_races_quic_first_on_the_origins_own_addresses() {
    let run = origin(&learned(r#"h3=":443"; ma=3600"#)).run();
    assert_eq!(run.starts(), at(&[(Q6A, 1_010)]), "{}", run.timeline());
    assert_eq!(run.won(), one(Q6A, 1_040));
    assert_eq!(run.attempts[0].alpn, Some(Alpn::H3));
    // The endpoint order: QUIC leads on each address (profile PI).
    let order: Vec<_> = run.final_order.iter().map(|a| a.port()).collect();
    assert_eq!(order, [443, 443, 443, 443]);
}

#[test]
fn without_an_alternative_the_same_origin_is_reached_over_tcp_alone() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let run = origin(&db).run();
    assert_eq!(run.starts(), at(&[(V6A, 1_010)]), "{}", run.timeline());
    assert!(
        run.attempts
            .iter()
            .all(|a| a.plan.transport == TransportKind::Tcp)
    );
}

#[test]
fn an_https_record_without_h3_overrules_a_cached_h3_alternative() {
    // R-37: with `h3=":443"` cached and an HTTPS record `alpn=h2` for the same origin, no
    // QUIC attempt is made.
    let record = HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: vec![Alpn::H2],
        ..Default::default()
    };
    let run = answers(&learned(r#"h3=":443""#))
        .https_rr(10, vec![record])
        .ok_tls(V6A, 20, 30)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 1_010)]), "{}", run.timeline());
    assert!(
        run.attempts
            .iter()
            .all(|a| a.plan.transport == TransportKind::Tcp),
        "{}",
        run.timeline()
    );
}

#[test]
fn an_alternative_on_another_port_is_raced_on_that_port() {
    let run = answers(&learned(r#"h3=":8443""#))
        .https_rr(10, vec![])
        .drop(V6A)
        .run();
    let quic = &run.attempts[0];
    assert_eq!(
        quic.plan.transport,
        TransportKind::Quic,
        "{}",
        run.timeline()
    );
    assert_eq!(quic.plan.route.target.port(), 8443);
    assert_eq!(run.won(), one(Q6A, 1_040));
}

#[test]
fn alt_svc_quic_waits_for_the_https_answer_before_it_joins_the_race() {
    // R-37: the HTTPS answer could still name a record without h3, so the alternative is
    // not raced before it is in. AAAA and A come at 10; TCP to v6a (blackholed here) starts
    // when the race stops waiting for the HTTPS answer, at 60 (the Resolution Delay), its
    // ClientHello held for it; the answer (NODATA) at 100 adds QUIC to v6a, which starts at
    // the next attempt slot, 310, and wins at 340.
    let run = answers(&learned(r#"h3=":443""#))
        .https_rr(100, vec![])
        .drop(V6A)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 1_060), (Q6A, 1_310)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won(), one(Q6A, 1_340));
}

#[test]
fn an_expired_or_cleared_alternative_is_not_raced() {
    // `ma=1`: gone a second later (the scenario starts at 1 000 ms, so 999 ms is left; at
    // 2 000 nothing is).
    let db = learned(r#"h3=":443"; ma=1"#);
    let late = origin(&db).starting_at(2_000).run();
    assert_eq!(late.starts(), at(&[(V6A, 2_010)]), "{}", late.timeline());
    let db = learned(r#"h3=":443""#);
    let origin_address = Address::parse("https://example.com").unwrap();
    db.learn_alt_svc(
        NetworkId(0),
        &origin_address,
        &parse_alt_svc("clear"),
        Instant::ZERO,
    );
    let cleared = origin(&db).run();
    assert_eq!(
        cleared.starts(),
        at(&[(V6A, 1_010)]),
        "{}",
        cleared.timeline()
    );
}
