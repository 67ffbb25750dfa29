//! Cancellation by the caller (T45), and route memory across races: the behaviours the
//! design's performance table asks for (second contact, family health, adaptive delay).

mod common;
use common::*;

use std::sync::Arc;

use fastfallback_proto::{CancelReason, Instant};
use fastfallback_route::{RouteDatabase, RouteMemory};
use fastfallback_sim::{Event, Scenario};

#[test]
fn caller_abandoning_the_race_cancels_everything_and_starts_nothing() {
    // T45
    let run = Scenario::plain()
        .aaaa(10, &[V6A])
        .a(20, &[V4A])
        .abandon_at(100)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10)]));
    assert_eq!(run.cancelled(), at(&[(V6A, 100)]));
    assert!(run.events.iter().any(|e| matches!(
        e,
        Event::AttemptCancelled {
            reason: CancelReason::Abandoned,
            ..
        }
    )));
    assert_eq!(run.open_sockets, 0);
}

fn blackholed_v6(db: &Arc<RouteDatabase>, host: &str, start: u64) -> Scenario {
    Scenario::for_address(&format!("tcp://{host}:443"))
        .memory(db.clone())
        .starting_at(start)
        .aaaa(0, &[V6A])
        .a(0, &[V4A])
        .drop(V6A)
        .ok(V4A, 20)
}

#[test]
fn second_contact_skips_the_blackholed_family() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let first = blackholed_v6(&db, "example.com", 0).run();
    assert_eq!(first.starts(), at(&[(V6A, 0), (V4A, 250)]));
    assert_eq!(first.won(), one(V4A, 270));
    let second = blackholed_v6(&db, "example.com", 1000).run();
    assert_eq!(second.starts(), at(&[(V4A, 1000)]));
    assert_eq!(second.won(), one(V4A, 1020));
}

#[test]
fn new_host_after_another_hosts_ipv6_failed_leads_with_ipv4() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = blackholed_v6(&db, "one.example", 0).run();
    let other = Scenario::for_address("tcp://two.example:443")
        .memory(db)
        .starting_at(1000)
        .aaaa(0, &[V6B])
        .a(0, &[V4B])
        .drop(V6B)
        .ok(V4B, 20)
        .run();
    assert_eq!(other.starts(), at(&[(V4B, 1000)]));
    assert_eq!(other.won(), one(V4B, 1020));
}

#[test]
fn slow_ipv6_is_demoted_on_second_contact() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let run = |start| {
        Scenario::plain()
            .memory(db.clone())
            .starting_at(start)
            .aaaa(0, &[V6A])
            .a(0, &[V4A])
            .ok(V6A, 400)
            .ok(V4A, 20)
            .run()
    };
    assert_eq!(run(0).won(), one(V4A, 270));
    let second = run(1000);
    assert_eq!(second.starts(), at(&[(V4A, 1000)]));
    assert_eq!(second.won(), one(V4A, 1020));
}

#[test]
fn warm_network_rtt_shortens_the_delay_for_a_new_blackholed_host() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    // A healthy host measures both families at 20 ms.
    let warm = Scenario::for_address("tcp://warm.example:443")
        .memory(db.clone())
        .aaaa(0, &[V6C])
        .ok(V6C, 20)
        .run();
    assert_eq!(warm.won(), one(V6C, 20));
    remember_rtt(&db, "tcp://warm.example:443", "192.0.2.3:443", 20);
    // A new host whose IPv6 is blackholed: CAD = clamp(3 × 20, 100, 2000) = 100.
    let run = blackholed_v6(&db, "new.example", 1000).run();
    assert_eq!(run.starts(), at(&[(V6A, 1000), (V4A, 1100)]));
    assert_eq!(run.won(), one(V4A, 1120));
}

#[test]
fn refused_route_is_postponed_on_the_next_race() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let run = |start| {
        Scenario::plain()
            .memory(db.clone())
            .starting_at(start)
            .aaaa(0, &[V6A, V6B])
            .refuse(V6A, 5)
            .ok(V6B, 20)
            .run()
    };
    // P4: the refusal at 5 starts the next attempt at once.
    assert_eq!(run(0).starts(), at(&[(V6A, 0), (V6B, 5)]));
    assert_eq!(run(1000).starts(), at(&[(V6B, 1000)]));
}

#[test]
fn tls_failure_is_remembered_unlike_okhttp() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = Scenario::https()
        .memory(db.clone())
        .aaaa(0, &[V6A])
        .behave(
            V6A,
            fastfallback_sim::Behaviour::TlsFail {
                tcp: 10,
                tls: 10,
                follow_up: None,
            },
        )
        .run();
    let origin = fastfallback_route::Address::parse("https://example.com").unwrap();
    let view = db.view(
        fastfallback_route::NetworkId(0),
        &origin,
        Instant::from_millis(100),
    );
    assert!(view.is_postponed(
        format!("[{V6A}]:443").parse().unwrap(),
        Instant::from_millis(100)
    ));
}

#[test]
fn memory_off_keeps_the_standard_timeline() {
    let db = Arc::new(RouteDatabase::new(RouteMemory {
        enabled: false,
        ..Default::default()
    }));
    let _ = blackholed_v6(&db, "example.com", 0).run();
    let second = blackholed_v6(&db, "example.com", 1000).run();
    assert_eq!(second.starts(), at(&[(V6A, 1000), (V4A, 1250)]));
}

#[test]
fn second_contact_waits_for_the_ipv4_answer_instead_of_starting_the_dead_family() {
    // The AAAA answer comes first this time: memory says IPv6 is blackholed, so the race waits
    // for the A answer (within the Resolution Delay) rather than start the dead family.
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = blackholed_v6(&db, "example.com", 0).run();
    let second = Scenario::for_address("tcp://example.com:443")
        .memory(db)
        .starting_at(1000)
        .aaaa(2, &[V6A])
        .a(7, &[V4A])
        .drop(V6A)
        .ok(V4A, 20)
        .run();
    assert_eq!(second.starts(), at(&[(V4A, 1007)]));
    assert_eq!(second.won(), one(V4A, 1027));
}

#[test]
fn a_second_choice_waits_no_longer_than_the_resolution_delay() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = blackholed_v6(&db, "example.com", 0).run();
    let second = Scenario::for_address("tcp://example.com:443")
        .memory(db)
        .starting_at(1000)
        .aaaa(2, &[V6A])
        .a(300, &[V4A])
        .drop(V6A)
        .ok(V4A, 20)
        .run();
    // First positive answer at 1002 + RD 50 ms: the remembered-bad route starts at 1052.
    assert_eq!(second.starts()[0], (V6A.parse().unwrap(), 1052));
}

#[test]
fn a_refused_route_waits_for_the_other_family_when_its_answer_came_first() {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let run = |start| {
        Scenario::plain()
            .memory(db.clone())
            .starting_at(start)
            .aaaa(0, &[V6A])
            .a(3, &[V4A])
            .refuse(V6A, 1)
            .ok(V4A, 20)
            .run()
    };
    // Refused at 1 with nothing else known; the A answer at 3 starts at once (P4).
    assert_eq!(run(0).starts(), at(&[(V6A, 0), (V4A, 3)]));
    assert_eq!(run(1000).starts(), at(&[(V4A, 1003)]));
}

#[test]
fn now_and_then_a_race_ignores_history_so_a_recovered_family_is_noticed() {
    // HEv3 §5.3: clients with different histories must converge. One race in
    // `explore_one_in` (seeded: seed 6 is such a race) orders as a first contact would.
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = blackholed_v6(&db, "example.com", 0).run();
    let recovered = |seed| {
        Scenario::for_address("tcp://example.com:443")
            .memory(db.clone())
            .seed(seed)
            .starting_at(1000)
            .aaaa(0, &[V6A])
            .a(0, &[V4A])
            .ok(V6A, 20)
            .ok(V4A, 20)
            .run()
    };
    let usual = recovered(0);
    assert!(!usual.history_ignored);
    assert_eq!(
        usual.starts(),
        at(&[(V4A, 1000)]),
        "memory sends IPv4 first"
    );
    let explorer = recovered(6);
    assert!(explorer.history_ignored);
    assert_eq!(explorer.starts(), at(&[(V6A, 1000)]));
    assert_eq!(explorer.won(), one(V6A, 1020));
    // What the explorer learned reaches the store: IPv6 works again.
    let after = recovered(0);
    assert_eq!(after.starts(), at(&[(V6A, 1000)]));
}

#[test]
fn memory_of_one_network_is_not_used_on_another() {
    // HEv3 §5.3: history MUST NOT be used across provisioning domains.
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let _ = blackholed_v6(&db, "example.com", 0).run();
    let elsewhere = blackholed_v6(&db, "example.com", 1000)
        .network(fastfallback_route::NetworkId(99))
        .run();
    assert_eq!(elsewhere.starts(), at(&[(V6A, 1000), (V4A, 1250)]));
    // Back home, the memory is still there.
    let home = blackholed_v6(&db, "example.com", 2000).run();
    assert_eq!(home.starts(), at(&[(V4A, 2000)]));
}

#[test]
fn an_abandoned_race_still_reports_what_it_learned() {
    let run = Scenario::plain()
        .aaaa(10, &[V6A])
        .a(20, &[V4A])
        .abandon_at(100)
        .memory(Arc::new(RouteDatabase::new(RouteMemory::default())))
        .run();
    assert_eq!(
        run.lessons,
        [fastfallback_route::Lesson {
            target: format!("[{V6A}]:443").parse().unwrap(),
            at: Instant::from_millis(100),
            kind: fastfallback_route::LessonKind::Unfinished {
                elapsed: std::time::Duration::from_millis(90)
            },
        }]
    );
}

// ---- single flight: a race that waits for another call's connect ----

#[test]
fn a_waiting_race_sends_nothing_and_ends_on_the_connection_its_leader_pooled() {
    let run = Scenario::plain()
        .waiting()
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .pooled_at(270)
        .run();
    assert!(run.queries().is_empty(), "{}", run.timeline());
    assert!(run.starts().is_empty());
    assert_eq!(run.wins(), at(&[("pooled", 270)]));
}

#[test]
fn a_released_race_resolves_and_connects_at_once_preferring_the_route_that_just_won() {
    // The leader won on IPv4 after 250 ms of a silent IPv6 (HTTP/1: nothing to share); its
    // lessons say so.
    let lesson = |target: String, kind| fastfallback_route::Lesson {
        target: target.parse().unwrap(),
        at: Instant::from_millis(270),
        kind,
    };
    let ms = std::time::Duration::from_millis;
    let news = vec![
        lesson(
            format!("[{V6A}]:443"),
            fastfallback_route::LessonKind::Unfinished { elapsed: ms(260) },
        ),
        lesson(
            format!("{V4A}:443"),
            fastfallback_route::LessonKind::Connected { rtt: ms(20) },
        ),
    ];
    let run = Scenario::plain()
        .memory(Arc::new(RouteDatabase::new(RouteMemory::default())))
        .waiting()
        .released_at(270, news)
        .aaaa(1, &[V6A])
        .a(1, &[V4A])
        .drop(V6A)
        .ok(V4A, 20)
        .run();
    // The queries go out at the release (the scripted answers come back at once, a cache hit).
    assert_eq!(run.queries()[0].1, 270);
    assert_eq!(run.starts(), at(&[(V4A, 270)]));
    assert_eq!(run.won(), one(V4A, 290));
}

#[test]
fn a_waiting_race_still_has_its_connect_deadline() {
    let run = Scenario::plain()
        .waiting()
        .connect_timeout(1000)
        .aaaa(10, &[V6A])
        .run();
    let (err, t) = run.failed().expect("fails");
    assert_eq!(
        (err.kind, t),
        (fastfallback_proto::RaceErrorKind::TimedOut, 1000)
    );
    assert!(run.queries().is_empty());
}
