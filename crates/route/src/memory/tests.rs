use super::*;
use fastfallback_proto::AltSvc;
use fastfallback_proto::AttemptErrorKind;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at(n: u64) -> Instant {
    Instant::from_millis(n)
}

const V6: &str = "[2001:db8::a]:443";
const V4: &str = "192.0.2.1:443";
const HOME: NetworkId = NetworkId(1);

fn origin() -> Address {
    Address::parse("https://example.com").unwrap()
}

fn lesson(target: &str, t: u64, kind: LessonKind) -> Lesson {
    Lesson {
        target: target.parse().unwrap(),
        at: at(t),
        kind,
    }
}

fn failed(kind: AttemptErrorKind) -> LessonKind {
    LessonKind::Failed {
        kind,
        phase: Phase::Tcp,
    }
}

fn db_with(config: RouteMemory, lessons: &[Lesson]) -> RouteDatabase {
    let db = RouteDatabase::new(config);
    db.learn(HOME, &origin(), lessons.iter().copied());
    db
}

fn connected(rtt_ms: u64) -> LessonKind {
    LessonKind::Connected { rtt: ms(rtt_ms) }
}

#[test]
fn loopback_connects_teach_no_family_record() {
    let mut view = MemoryView::empty(RouteMemory::default());
    for target in ["127.0.0.1:80", "[::1]:80", "[::ffff:127.0.0.1]:80"] {
        view.learn(&lesson(target, 0, connected(1)));
        view.learn(&lesson(target, 0, failed(AttemptErrorKind::Unreachable)));
    }
    assert_eq!(view.family_srtt(Family::V4, at(1)), None);
    assert_eq!(view.family_srtt(Family::V6, at(1)), None);
    assert!(!view.family_path_failed(Family::V6, at(1)));
    view.learn(&lesson(V4, 0, connected(30)));
    assert_eq!(view.family_srtt(Family::V4, at(1)), Some(ms(30)));
}

#[test]
fn an_ip_literal_loopback_race_teaches_the_store_nothing() {
    let db = RouteDatabase::new(RouteMemory::default());
    let literal = Address::parse("127.0.0.1:8080").unwrap();
    let learned = db.learn(HOME, &literal, [lesson("127.0.0.1:8080", 0, connected(1))]);
    assert!(!learned);
    assert!(db.is_empty());
    let remote = Address::parse("192.0.2.1:443").unwrap();
    assert!(db.learn(HOME, &remote, [lesson(V4, 0, connected(30))]));
    assert!(!db.is_empty());
}

#[test]
fn a_loopback_literal_race_keeps_no_memory_and_a_remote_literal_one_learns() {
    let db = RouteDatabase::new(RouteMemory::default());
    for loopback in ["127.0.0.1:8080", "[::1]:8080", "[::ffff:127.0.0.1]:8080"] {
        let view = db.view(HOME, &Address::parse(loopback).unwrap(), at(0));
        assert!(!view.is_enabled(), "{loopback}");
    }
    let remote = Address::parse("192.0.2.1:443").unwrap();
    assert!(db.view(HOME, &remote, at(0)).is_enabled());
    assert!(db.learn(HOME, &remote, [lesson("192.0.2.1:443", 0, connected(30))]));
}

#[test]
fn localhost_routes_are_remembered_without_marking_their_families() {
    let db = RouteDatabase::new(RouteMemory::default());
    let localhost = Address::parse("localhost:8080").unwrap();
    let lessons = [
        lesson("[::1]:8080", 0, failed(AttemptErrorKind::Refused)),
        lesson("127.0.0.1:8080", 1, connected(1)),
    ];
    assert!(db.learn(HOME, &localhost, lessons));
    let view = db.view(HOME, &localhost, at(2));
    // The refused ::1 waits its turn next time (its route record), and neither family's
    // record moved: a local server says nothing about the network's paths.
    assert!(view.is_postponed("[::1]:8080".parse().unwrap(), at(2)));
    assert_eq!(view.family_srtt(Family::V4, at(2)), None);
    assert!(!view.family_path_failed(Family::V6, at(2)));
}

#[test]
fn tcp_failures_postpone_the_route_until_ttl() {
    let config = RouteMemory {
        ttl: ms(1000),
        ..Default::default()
    };
    let db = db_with(config, &[lesson(V6, 0, failed(AttemptErrorKind::Refused))]);
    let r = V6.parse().unwrap();
    assert!(db.view(HOME, &origin(), at(1000)).is_postponed(r, at(1000)));
    assert!(!db.view(HOME, &origin(), at(1000)).is_postponed(r, at(1001)));
}

#[test]
fn tls_failures_are_remembered_but_do_not_mark_the_family() {
    let tls_timeout = LessonKind::Failed {
        kind: AttemptErrorKind::TimedOut,
        phase: Phase::Tls,
    };
    let db = db_with(RouteMemory::default(), &[lesson(V4, 0, tls_timeout)]);
    let view = db.view(HOME, &origin(), at(5));
    assert!(view.is_postponed(V4.parse().unwrap(), at(5)));
    assert!(!view.family_path_failed(Family::V4, at(5)));
}

#[test]
fn srtt_follows_rfc6298_smoothing() {
    let db = db_with(
        RouteMemory::default(),
        &[
            lesson(V4, 0, LessonKind::Connected { rtt: ms(80) }),
            lesson(V4, 1, LessonKind::Connected { rtt: ms(160) }),
        ],
    );
    let view = db.view(HOME, &origin(), at(2));
    assert_eq!(view.srtt(V4.parse().unwrap(), at(2)), Some(ms(90)));
}

#[test]
fn unfinished_attempt_raises_srtt_to_a_lower_bound() {
    let db = db_with(
        RouteMemory::default(),
        &[
            lesson(V6, 0, LessonKind::Connected { rtt: ms(20) }),
            lesson(V6, 300, LessonKind::Unfinished { elapsed: ms(270) }),
            lesson(V6, 400, LessonKind::Unfinished { elapsed: ms(100) }),
        ],
    );
    let view = db.view(HOME, &origin(), at(400));
    assert_eq!(view.srtt(V6.parse().unwrap(), at(400)), Some(ms(270)));
    assert_eq!(view.family_srtt(Family::V6, at(400)), Some(ms(270)));
}

#[test]
fn a_measured_sample_replaces_a_lower_bound() {
    let db = db_with(
        RouteMemory::default(),
        &[
            lesson(V6, 0, LessonKind::Unfinished { elapsed: ms(250) }),
            lesson(V6, 10, LessonKind::Connected { rtt: ms(20) }),
            lesson(V6, 20, LessonKind::Connected { rtt: ms(100) }),
        ],
    );
    let view = db.view(HOME, &origin(), at(30));
    // 20 replaced the bound of 250; then 7/8 × 20 + 1/8 × 100 = 30.
    assert_eq!(view.srtt(V6.parse().unwrap(), at(30)), Some(ms(30)));
}

#[test]
fn entries_expire_after_ttl() {
    let config = RouteMemory {
        ttl: ms(100),
        ..Default::default()
    };
    let db = db_with(
        config,
        &[lesson(V4, 0, LessonKind::Connected { rtt: ms(20) })],
    );
    let r = V4.parse().unwrap();
    assert_eq!(
        db.view(HOME, &origin(), at(100)).srtt(r, at(100)),
        Some(ms(20))
    );
    let late = db.view(HOME, &origin(), at(101));
    assert_eq!(late.srtt(r, at(101)), None);
    assert_eq!(late.family_srtt(Family::V4, at(101)), None);
}

#[test]
fn size_stays_bounded_and_the_oldest_origins_go_first() {
    let db = RouteDatabase::new(RouteMemory {
        max_routes: 16,
        ..Default::default()
    });
    let target: SocketAddr = V4.parse().unwrap();
    for i in 0..100u64 {
        let o = Address::parse(&format!("tcp://h{i}.example:443")).unwrap();
        let l = Lesson {
            target,
            at: at(i),
            kind: LessonKind::Connected { rtt: ms(10) },
        };
        db.learn(HOME, &o, [l]);
        assert!(db.len(HOME) <= 16);
    }
    let newest = Address::parse("tcp://h99.example:443").unwrap();
    let oldest = Address::parse("tcp://h0.example:443").unwrap();
    assert!(
        db.view(HOME, &newest, at(100))
            .srtt(target, at(100))
            .is_some()
    );
    assert!(
        db.view(HOME, &oldest, at(100))
            .srtt(target, at(100))
            .is_none()
    );
}

#[test]
fn path_failure_marks_family_worse_until_success() {
    let mut view = MemoryView::empty(RouteMemory::default());
    view.learn(&lesson(V6, 0, failed(AttemptErrorKind::Unreachable)));
    assert!(view.family_is_worse(Family::V6, ms(100), at(1)));
    assert!(!view.family_is_worse(Family::V4, ms(100), at(1)));
    view.learn(&lesson(
        "[2001:db8::b]:443",
        2,
        LessonKind::Connected { rtt: ms(20) },
    ));
    assert!(!view.family_is_worse(Family::V6, ms(100), at(3)));
}

#[test]
fn slow_family_is_worse_only_beyond_the_margin() {
    let mut view = MemoryView::empty(RouteMemory::default());
    view.learn(&lesson(V4, 0, LessonKind::Connected { rtt: ms(20) }));
    view.learn(&lesson(V6, 0, LessonKind::Connected { rtt: ms(100) }));
    assert!(!view.family_is_worse(Family::V6, ms(100), at(1)));
    view.learn(&lesson(V6, 1, LessonKind::Unfinished { elapsed: ms(270) }));
    assert!(view.family_is_worse(Family::V6, ms(100), at(2)));
}

#[test]
fn disabled_memory_records_nothing() {
    let config = RouteMemory {
        enabled: false,
        ..Default::default()
    };
    let db = db_with(config, &[lesson(V4, 0, failed(AttemptErrorKind::Refused))]);
    assert!(db.is_empty());
    let mut view = MemoryView::disabled();
    view.learn(&lesson(V4, 0, LessonKind::Connected { rtt: ms(1) }));
    assert!(view.is_empty());
}

#[test]
fn routes_learned_for_one_origin_do_not_reorder_another() {
    let db = db_with(
        RouteMemory::default(),
        &[lesson(V6, 0, failed(AttemptErrorKind::Refused))],
    );
    let other = Address::parse("https://other.example").unwrap();
    let view = db.view(HOME, &other, at(1));
    assert!(!view.is_postponed(V6.parse().unwrap(), at(1)));
    // Family health is a property of the network, so it is shared.
    let db = db_with(
        RouteMemory::default(),
        &[lesson(V6, 0, failed(AttemptErrorKind::Unreachable))],
    );
    assert!(
        db.view(HOME, &other, at(1))
            .family_path_failed(Family::V6, at(1))
    );
}

#[test]
fn an_ip_literal_origin_teaches_only_the_family_records() {
    let literal = Address::parse("tcp://192.0.2.1:443").unwrap();
    let db = RouteDatabase::new(RouteMemory::default());
    db.learn(
        HOME,
        &literal,
        [lesson(V4, 0, LessonKind::Connected { rtt: ms(30) })],
    );
    assert_eq!(db.len(HOME), 0, "no route kept for a single-route origin");
    let view = db.view(HOME, &origin(), at(1));
    assert_eq!(view.family_srtt(Family::V4, at(1)), Some(ms(30)));
}

#[test]
fn another_network_sets_memory_aside_until_it_comes_back() {
    let db = db_with(
        RouteMemory::default(),
        &[lesson(V6, 0, failed(AttemptErrorKind::Unreachable))],
    );
    let away = NetworkId(2);
    assert!(db.view(away, &origin(), at(1)).is_empty());
    db.learn(
        away,
        &origin(),
        [lesson(V6, 2, LessonKind::Connected { rtt: ms(5) })],
    );
    assert_eq!(db.networks(), [away, HOME]);
    let back = db.view(HOME, &origin(), at(3));
    assert!(back.family_path_failed(Family::V6, at(3)));
}

#[test]
fn only_a_few_networks_are_kept() {
    let db = RouteDatabase::new(RouteMemory::default());
    for n in 0..10 {
        db.learn(
            NetworkId(n),
            &origin(),
            [lesson(V4, n, LessonKind::Connected { rtt: ms(5) })],
        );
    }
    assert_eq!(db.networks().len(), MAX_NETWORKS);
    assert_eq!(db.networks()[0], NetworkId(9));
}

fn quic(t: u64, kind: LessonKind) -> Lesson {
    lesson(V6, t, kind)
}

#[test]
fn a_broken_quic_marks_neither_the_route_nor_its_family() {
    let db = db_with(RouteMemory::default(), &[quic(0, LessonKind::QuicBroken)]);
    let view = db.view(HOME, &origin(), at(1));
    assert!(view.is_quic_broken(at(1)));
    let target = V6.parse().unwrap();
    assert!(!view.is_postponed(target, at(1)));
    assert_eq!(view.srtt(target, at(1)), None);
    assert!(!view.family_path_failed(Family::V6, at(1)));
    assert_eq!(view.family_srtt(Family::V6, at(1)), None);
}

#[test]
fn a_view_that_forgets_history_keeps_the_broken_quic_record() {
    let db = db_with(RouteMemory::default(), &[quic(0, LessonKind::QuicBroken)]);
    let mut view = db.view(HOME, &origin(), at(1));
    view.forget();
    assert!(
        view.is_quic_broken(at(1)),
        "QUIC's own backoff decides when it is tried again"
    );
}

#[test]
fn quic_broken_for_one_origin_leads_a_new_origin_with_tcp_until_quic_works_anywhere() {
    let db = db_with(RouteMemory::default(), &[quic(0, LessonKind::QuicBroken)]);
    let other = Address::parse("https://other.example").unwrap();
    assert!(db.view(HOME, &other, at(1)).is_quic_broken(at(1)));
    assert!(!db.view(NetworkId(2), &other, at(1)).is_quic_broken(at(1)));
    // QUIC works for a third origin: the network's record goes, the first origin's stays.
    let third = Address::parse("https://third.example").unwrap();
    db.learn(HOME, &third, [quic(2, LessonKind::QuicWorked)]);
    assert!(!db.view(HOME, &other, at(3)).is_quic_broken(at(3)));
    assert!(db.view(HOME, &origin(), at(3)).is_quic_broken(at(3)));
}

#[test]
fn an_origin_whose_quic_worked_is_not_held_back_by_the_networks_record() {
    let db = RouteDatabase::new(RouteMemory::default());
    db.learn(HOME, &origin(), [quic(0, LessonKind::QuicWorked)]);
    let other = Address::parse("https://other.example").unwrap();
    db.learn(HOME, &other, [quic(1, LessonKind::QuicBroken)]);
    assert!(db.view(HOME, &other, at(2)).is_quic_broken(at(2)));
    // The first origin has no record (its success forgot everything), so the network's
    // record speaks for it too.
    assert!(db.view(HOME, &origin(), at(2)).is_quic_broken(at(2)));
    db.learn(
        HOME,
        &origin(),
        [
            quic(3, LessonKind::QuicBroken),
            quic(4, LessonKind::QuicWorked),
        ],
    );
    // QUIC worked on the network again: a new origin leads with QUIC; `other` keeps its own
    // record.
    let new = Address::parse("https://new.example").unwrap();
    assert!(!db.view(HOME, &new, at(5)).is_quic_broken(at(5)));
    assert!(db.view(HOME, &other, at(5)).is_quic_broken(at(5)));
}

#[test]
fn the_store_lengthens_quic_backoff_while_a_view_keeps_the_first_period() {
    let db = db_with(
        RouteMemory::default(),
        &[
            quic(0, LessonKind::QuicBroken),
            quic(1, LessonKind::QuicBroken),
        ],
    );
    let view = db.view(HOME, &origin(), at(2));
    assert_eq!(
        view.quic_broken_until(at(2)),
        Some(at(1) + QUIC_BROKEN_FOR * 2)
    );
    let mut local = MemoryView::empty(RouteMemory::default());
    local.learn(&quic(0, LessonKind::QuicBroken));
    assert_eq!(
        local.quic_broken_until(at(1)),
        Some(at(0) + QUIC_BROKEN_FOR)
    );
    local.learn(&quic(1, LessonKind::QuicWorked));
    assert!(local.is_empty());
}

#[test]
fn origins_known_only_for_their_quic_records_stay_within_the_bound() {
    let db = RouteDatabase::new(RouteMemory {
        max_routes: 16,
        ..Default::default()
    });
    for i in 0..100u64 {
        let o = Address::parse(&format!("https://h{i}.example")).unwrap();
        db.learn(HOME, &o, [quic(i, LessonKind::QuicBroken)]);
        assert!(db.len(HOME) <= 16, "{} slots", db.len(HOME));
    }
    let newest = Address::parse("https://h99.example").unwrap();
    assert!(db.view(HOME, &newest, at(100)).is_quic_broken(at(100)));
}

#[test]
fn loopback_quic_lessons_teach_the_origin_but_not_the_network() {
    let db = RouteDatabase::new(RouteMemory::default());
    let localhost = Address::parse("https://localhost:8443").unwrap();
    let lesson = lesson("[::1]:8443", 0, LessonKind::QuicBroken);
    db.learn(HOME, &localhost, [lesson]);
    assert!(db.view(HOME, &localhost, at(1)).is_quic_broken(at(1)));
    assert!(!db.view(HOME, &origin(), at(1)).is_quic_broken(at(1)));
}

fn alt(value: &str) -> AltSvc {
    fastfallback_proto::parse_alt_svc(value)
}

#[test]
fn a_new_alt_svc_value_replaces_the_alternatives_and_clear_forgets_them() {
    let db = RouteDatabase::new(RouteMemory::default());
    let o = origin();
    assert!(db.learn_alt_svc(HOME, &o, &alt(r#"h3=":443", h3=":8443""#), at(0)));
    assert_eq!(db.alternatives(HOME, &o, at(1)), [443, 8443]);
    db.learn_alt_svc(HOME, &o, &alt(r#"h3=":9443""#), at(2));
    assert_eq!(db.alternatives(HOME, &o, at(3)), [9443]);
    // A value none of whose alternatives parses says nothing (RFC 7838 §3).
    assert!(!db.learn_alt_svc(HOME, &o, &alt("garbage"), at(4)));
    assert_eq!(db.alternatives(HOME, &o, at(5)), [9443]);
    assert!(db.learn_alt_svc(HOME, &o, &alt("clear"), at(6)));
    assert!(db.alternatives(HOME, &o, at(7)).is_empty());
    assert_eq!(db.len(HOME), 0, "no slot for an origin with nothing kept");
}

#[test]
fn only_h3_on_the_origins_own_host_is_kept_and_only_for_https_origins_without_proxies() {
    let db = RouteDatabase::new(RouteMemory::default());
    let value = alt(r#"h2=":8443", h3="cdn.example:443", h3="EXAMPLE.COM.:4443", h3=":443""#);
    db.learn_alt_svc(HOME, &origin(), &value, at(0));
    assert_eq!(db.alternatives(HOME, &origin(), at(1)), [4443, 443]);
    let plain = Address::parse("http://example.com").unwrap();
    assert!(!db.learn_alt_svc(HOME, &plain, &value, at(0)));
    let proxied = origin().with_proxy(crate::Proxy::http(Host::Name("proxy.example".into()), 3128));
    assert!(!db.learn_alt_svc(HOME, &proxied, &value, at(0)));
    assert!(db.alternatives(HOME, &proxied, at(1)).is_empty());
}

#[test]
fn alternatives_are_set_aside_on_another_network_unless_they_persist() {
    let db = RouteDatabase::new(RouteMemory::default());
    let other = Address::parse("https://other.example").unwrap();
    db.learn_alt_svc(HOME, &origin(), &alt(r#"h3=":443""#), at(0));
    db.learn_alt_svc(HOME, &other, &alt(r#"h3=":443"; persist=1"#), at(0));
    let away = NetworkId(2);
    assert!(db.alternatives(away, &origin(), at(1)).is_empty());
    assert_eq!(db.alternatives(away, &other, at(1)), [443]);
}

#[test]
fn origins_known_only_for_their_alternatives_stay_within_the_bound() {
    let db = RouteDatabase::new(RouteMemory {
        max_routes: 16,
        ..Default::default()
    });
    for i in 0..100u64 {
        let o = Address::parse(&format!("https://h{i}.example")).unwrap();
        db.learn_alt_svc(HOME, &o, &alt(r#"h3=":443""#), at(i));
        assert!(db.len(HOME) <= 16, "{} slots", db.len(HOME));
    }
    // Bounded by evicting the oldest, not by keeping nothing.
    let newest = Address::parse("https://h99.example").unwrap();
    assert_eq!(db.alternatives(HOME, &newest, at(100)), [443]);
    assert!(db.len(HOME) > 0);
}
