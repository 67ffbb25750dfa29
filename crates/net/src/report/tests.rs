//! The report's text and JSON forms.
use super::*;
use fastfallback_proto::AttemptErrorKind;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn attempt(id: u32, route: &str, started: u64, outcome: AttemptOutcome) -> AttemptReport {
    let route: SocketAddr = route.parse().unwrap();
    AttemptReport {
        id,
        route,
        family: Family::of(route.ip()),
        transport: TransportKind::Tcp,
        plan: format!("tcp {route}"),
        tls: false,
        tls_config: None,
        proxy: None,
        started: ms(started),
        tcp_connected: None,
        ended: Some(ms(270)),
        outcome,
    }
}

fn report() -> RaceReport {
    let refused = AttemptError::new(AttemptErrorKind::Refused, Phase::Tcp, "refused");
    RaceReport {
        origin: "tcp://example.test:80".to_owned(),
        elapsed: Duration::from_micros(270_500),
        queries: vec![
            QueryReport {
                kind: QueryKind::Aaaa,
                name: None,
                sent: ms(0),
                answered: Some(ms(10)),
                answer: Some(AnswerReport::Addresses(vec![
                    "2001:db8::a".parse().unwrap(),
                ])),
                unlisted: 0,
            },
            QueryReport {
                kind: QueryKind::A,
                name: Some("svc.example.test".to_owned()),
                sent: ms(5),
                answered: None,
                answer: None,
                unlisted: 0,
            },
        ],
        attempts: vec![
            attempt(
                1,
                "[2001:db8::a]:80",
                10,
                AttemptOutcome::Cancelled {
                    reason: CancelReason::LostRace,
                    phase: Phase::Tcp,
                },
            ),
            attempt(2, "192.0.2.1:80", 20, AttemptOutcome::Failed(refused)),
            attempt(3, "192.0.2.2:80", 260, AttemptOutcome::Won),
        ],
        winner: Some(3),
        pooled: None,
        alpn: Some(Alpn::H2),
        error: None,
    }
}

#[test]
fn json_field_names_and_shapes_are_the_documented_ones() {
    let json: serde_json::Value = serde_json::from_str(&report().to_json()).unwrap();
    let expected = serde_json::json!({
        "origin": "tcp://example.test:80",
        "elapsed_ms": 270.5,
        "queries": [{
            "kind": "AAAA", "sent_ms": 0.0, "answered_ms": 10.0,
            "answer": {"addresses": ["2001:db8::a"]}
        }, {
            "kind": "A", "name": "svc.example.test", "sent_ms": 5.0, "answered_ms": null,
            "answer": null
        }],
        "attempts": [
            {"id": 1, "route": "[2001:db8::a]:80", "family": "v6", "transport": "tcp", "plan": "tcp [2001:db8::a]:80",
             "tls": false, "tls_config": null, "proxy": null, "started_ms": 10.0, "tcp_connected_ms": null, "ended_ms": 270.0,
             "outcome": {"status": "cancelled", "reason": "lost_race", "phase": "tcp"}},
            {"id": 2, "route": "192.0.2.1:80", "family": "v4", "transport": "tcp", "plan": "tcp 192.0.2.1:80",
             "tls": false, "tls_config": null, "proxy": null, "started_ms": 20.0, "tcp_connected_ms": null, "ended_ms": 270.0,
             "outcome": {"status": "failed", "kind": "refused", "phase": "tcp", "detail": "refused"}},
            {"id": 3, "route": "192.0.2.2:80", "family": "v4", "transport": "tcp", "plan": "tcp 192.0.2.2:80",
             "tls": false, "tls_config": null, "proxy": null, "started_ms": 260.0, "tcp_connected_ms": null, "ended_ms": 270.0,
             "outcome": {"status": "won"}}
        ],
        "winner": 3, "pooled": null, "alpn": "h2", "error": null
    });
    assert_eq!(json, expected);
}

#[test]
fn breakdown_splits_dns_waiting_tcp_and_tls_for_the_winner() {
    let mut r = report();
    r.attempts[2].tcp_connected = Some(ms(265));
    let b = r.breakdown().unwrap();
    assert_eq!(b.dns, ms(10));
    assert_eq!(b.waiting, ms(250));
    assert_eq!(b.tcp, ms(5));
    assert_eq!(b.tls, ms(5));
    r.winner = None;
    assert_eq!(r.breakdown(), None);
}
