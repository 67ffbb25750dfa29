//! Property tests of the race's invariants over random scenarios:
//! - no attempt starts after success;
//! - every attempt ends exactly once;
//! - no more attempts are in flight than the cap allows;
//! - timer-driven starts are at least 10 ms apart; two starts come closer only when the
//!   earlier one had already ended (P4), and never with `StartFloor::EveryStart`;
//! - the race never asks to be woken in the past;
//! - the race always ends, by the overall deadline at the latest;
//! - the same inputs at the same times give the same outputs, whatever a concurrent race
//!   sharing route memory does;
//! - with HTTPS records and a client that may speak QUIC: a QUIC attempt happens only for a
//!   client that speaks it, offers `h3` alone, never holds TLS nor tunnels, and never goes
//!   to a service with ECH; a TCP attempt never offers `h3` (HEv3 §6.2, R-35).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use std::sync::Arc;

use fastfallback_plan::{QuicOrder, StartFloor, WinAt};
use fastfallback_proto::{Alpn, AttemptErrorKind, AttemptId, HttpsRecord, TransportKind};
use fastfallback_route::{LessonKind, RouteDatabase, RouteMemory};
use fastfallback_sim::{Behaviour, Event, Scenario, run_together};
use proptest::prelude::*;

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        (0u64..600, 0u64..200).prop_map(|(tcp, tls)| Behaviour::Ok { tcp, tls }),
        (0u64..600).prop_map(|after| Behaviour::Fail {
            after,
            kind: AttemptErrorKind::Refused
        }),
        (0u64..600).prop_map(|after| Behaviour::Fail {
            after,
            kind: AttemptErrorKind::Unreachable
        }),
        (0u64..300, 0u64..300).prop_map(|(tcp, tls)| Behaviour::TlsFail {
            tcp,
            tls,
            follow_up: None
        }),
        Just(Behaviour::Drop),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    v6: Vec<Behaviour>,
    v4: Vec<Behaviour>,
    aaaa_at: Option<u64>,
    a_at: Option<u64>,
    cap: usize,
    delay: u64,
    tls: bool,
    win_at_tcp: bool,
    pooled_at: Option<u64>,
    literal_floor: bool,
    /// An HTTPS answer `1 . alpn=…` (TLS origins only): when, which ALPN set (0: h2; 1: h3
    /// and h2; 2: h3 alone, no-default-alpn), and whether it carries ECH.
    https: Option<(u64, u8, bool)>,
    /// Whether the client speaks QUIC, whether QUIC goes first (profile CG), and how each
    /// address answers QUIC, in the order of `v6` then `v4`.
    quic: (bool, bool, Vec<Behaviour>),
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(behaviour(), 0..6),
        prop::collection::vec(behaviour(), 0..6),
        prop::option::of(0u64..500),
        prop::option::of(0u64..500),
        1usize..5,
        10u64..400,
        any::<bool>(),
        any::<bool>(),
        prop::option::weighted(0.2, 0u64..2000),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.5, (0u64..500, 0u8..3, prop::bool::weighted(0.2))),
        (
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec(behaviour(), 0..12),
        ),
    )
        .prop_map(
            |(
                v6,
                v4,
                aaaa_at,
                a_at,
                cap,
                delay,
                tls,
                win_at_tcp,
                pooled_at,
                literal_floor,
                https,
                quic,
            )| Case {
                v6,
                v4,
                aaaa_at,
                a_at,
                cap,
                delay,
                tls,
                win_at_tcp,
                pooled_at,
                literal_floor,
                https,
                quic,
            },
        )
}

fn scenario(c: &Case) -> Scenario {
    let mut s = if c.tls {
        Scenario::https()
    } else {
        Scenario::plain()
    };
    s = s.tune(|p| {
        p.max_concurrent_attempts = NonZeroUsize::new(c.cap).unwrap();
        p.attempt_delay = Duration::from_millis(c.delay);
        p.min_attempt_delay = Duration::from_millis(c.delay.min(100));
        p.connect_timeout = Duration::from_millis(3000);
        p.win_at = if c.win_at_tcp {
            WinAt::Tcp
        } else {
            WinAt::Handshake
        };
        p.start_floor = if c.literal_floor {
            StartFloor::EveryStart
        } else {
            StartFloor::TimerDriven
        };
        p.quic = c.quic.0;
        p.quic_order = if c.quic.1 {
            QuicOrder::QuicFirst
        } else {
            QuicOrder::Interleaved
        };
    });
    if let (true, Some((t, set, ech))) = (c.tls, c.https) {
        let (alpn, no_default_alpn) = match set {
            0 => (vec![Alpn::H2], false),
            1 => (vec![Alpn::H3, Alpn::H2], false),
            _ => (vec![Alpn::H3], true),
        };
        let record = HttpsRecord {
            priority: 1,
            target: ".".into(),
            alpn,
            no_default_alpn,
            ech: ech.then(|| Arc::from(&b"an ECHConfigList"[..])),
            ..Default::default()
        };
        s = s.https_rr(t, vec![record]);
    }
    let v6: Vec<String> = (0..c.v6.len())
        .map(|i| format!("2001:db8::{}", i + 1))
        .collect();
    let v4: Vec<String> = (0..c.v4.len())
        .map(|i| format!("192.0.2.{}", i + 1))
        .collect();
    for (a, b) in v6.iter().zip(&c.v6).chain(v4.iter().zip(&c.v4)) {
        s = s.behave(a, b.clone());
    }
    for (a, b) in v6.iter().chain(&v4).zip(&c.quic.2) {
        s = s.behave_quic(a, b.clone());
    }
    let v6: Vec<&str> = v6.iter().map(String::as_str).collect();
    let v4: Vec<&str> = v4.iter().map(String::as_str).collect();
    if let Some(t) = c.aaaa_at {
        s = s.aaaa(t, &v6);
    }
    if let Some(t) = c.a_at {
        s = s.a(t, &v4);
    }
    if let Some(t) = c.pooled_at {
        s = s.pooled_at(t);
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn race_invariants_hold_for_random_networks(c in case()) {
        let run = scenario(&c).run();
        let done_at = run.events.iter().find_map(|e| match e {
            Event::Done { t, .. } | Event::Failed { t, .. } => Some(*t),
            _ => None,
        });

        // The race always ends, by the deadline at the latest.
        prop_assert!(run.finished, "race did not finish:\n{}", run.timeline());
        let end = done_at.expect("finished races report an outcome");
        prop_assert!(end <= 3000, "ended at {end} after the 3000 ms deadline");

        // No attempt starts after success (or failure).
        let starts: Vec<u64> = run.starts().iter().map(|(_, t)| *t).collect();
        prop_assert!(starts.iter().all(|t| *t <= end));
        let last_start_event = run.events.iter().rposition(|e| matches!(e, Event::AttemptStart { .. }));
        let outcome_event = run.events.iter().position(|e| matches!(e, Event::Done { .. } | Event::Failed { .. }));
        if let (Some(s), Some(o)) = (last_start_event, outcome_event) {
            prop_assert!(s < o, "a start after the outcome:\n{}", run.timeline());
        }

        // RFC 8305 §5's 10 ms floor bounds the attempt delay: two starts come closer only when
        // the earlier one had already ended (reference profile P4), and never with the
        // literal reading.
        for w in run.attempts.windows(2) {
            let (prev, next) = (&w[0], &w[1]);
            if next.started < prev.started + Duration::from_millis(10) {
                prop_assert!(!c.literal_floor, "starts {} and {} closer than 10 ms", prev.started, next.started);
                prop_assert!(
                    prev.ended.is_some_and(|e| e <= next.started),
                    "{} started at {} while {} (started {}) was still running:\n{}",
                    next.id, next.started, prev.id, prev.started, run.timeline()
                );
            }
        }

        // Every attempt ends exactly once.
        let mut ends: HashMap<AttemptId, usize> = HashMap::new();
        for e in &run.events {
            if let Event::AttemptFailed { id, .. } | Event::AttemptCancelled { id, .. } = e {
                *ends.entry(*id).or_default() += 1;
            }
            if let Event::Done { winner: fastfallback_proto::Winner::Attempt(id), .. } = e {
                *ends.entry(*id).or_default() += 1;
            }
        }
        for a in &run.attempts {
            prop_assert!(!a.in_flight(), "attempt {} never ended:\n{}", a.id, run.timeline());
            prop_assert!(ends.get(&a.id).copied().unwrap_or(0) <= 1, "attempt {} ended twice", a.id);
        }

        // Never more in flight than the cap.
        prop_assert!(run.peak_in_flight <= c.cap);

        // Deadlines never go backwards past `now`.
        prop_assert_eq!(run.past_deadlines, 0);

        // QUIC attempts only for a client that speaks QUIC, each offering h3 alone, never
        // held, tunnelled, or carrying ECH; TCP attempts never offer h3.
        for a in &run.attempts {
            let alpn = a.plan.tls.as_ref().map(|t| t.alpn.clone()).unwrap_or_default();
            match a.plan.transport {
                TransportKind::Quic => {
                    prop_assert!(c.quic.0, "a QUIC attempt for a TCP-only client:\n{}", run.timeline());
                    prop_assert_eq!(alpn, vec![Alpn::H3]);
                    prop_assert!(!a.plan.hold_tls && !a.plan.tunnel);
                    prop_assert!(a.plan.tls.as_ref().is_some_and(|t| t.ech.is_none()));
                    prop_assert!(a.tcp_connected.is_none(), "a QUIC attempt with a TCP step");
                }
                TransportKind::Tcp => prop_assert!(!alpn.contains(&Alpn::H3)),
            }
        }

        // Nothing but the winner stays open.
        let won_by_attempt = run.won().is_some();
        prop_assert_eq!(run.open_sockets, usize::from(won_by_attempt));
    }
}

/// A later race on a network where a first contact left memory behind.
fn with_memory(c: &Case, db: &Arc<RouteDatabase>) -> Scenario {
    scenario(c).memory(db.clone()).starting_at(5000)
}

fn warmed_memory(c: &Case) -> Arc<RouteDatabase> {
    let db = Arc::new(RouteDatabase::new(RouteMemory {
        explore_one_in: 0,
        ..RouteMemory::default()
    }));
    // The same first contact on every copy, so every copy holds the same history.
    let _ = scenario(c).memory(db.clone()).run();
    db
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_race_gives_the_same_outputs_whatever_a_concurrent_race_does(c in case(), other in case()) {
        let solo_db = warmed_memory(&c);
        let solo = with_memory(&c, &solo_db).run();

        // The same race again, on an identical memory, but next to another race to the same
        // origin and addresses that shares the memory and writes to it while ours runs.
        let shared = warmed_memory(&c);
        let ours = with_memory(&c, &shared);
        let theirs = with_memory(&other, &shared);
        let runs = run_together(&[theirs, ours]);
        prop_assert_eq!(&runs[1].events, &solo.events, "\nsolo:\n{}\ntogether:\n{}", solo.timeline(), runs[1].timeline());
        prop_assert_eq!(&runs[1].lessons, &solo.lessons);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn quic_teaches_only_its_own_record_and_only_when_the_race_is_won(c in case()) {
        // With memory on, on the network a first contact left behind.
        let db = warmed_memory(&c);
        let run = with_memory(&c, &db).run();
        let winner = run.won().and_then(|_| run.attempts.iter().find(|a| a.state == fastfallback_plan::AttemptState::Won));
        let quic: Vec<_> = run.lessons.iter().filter(|l| l.kind.is_about_quic()).collect();
        prop_assert!(quic.len() <= 1, "more than one QUIC lesson: {quic:?}");
        match (winner, quic.first().map(|l| l.kind)) {
            (Some(w), Some(LessonKind::QuicWorked)) => prop_assert!(!w.over_tcp()),
            (Some(w), Some(LessonKind::QuicBroken)) => {
                prop_assert!(w.over_tcp());
                prop_assert!(
                    run.attempts.iter().any(|a| !a.over_tcp() && a.started <= w.started),
                    "QUIC judged broken though no QUIC attempt started before the winner:\n{}",
                    run.timeline()
                );
            }
            (Some(w), None) => prop_assert!(
                w.over_tcp() && run.attempts.iter().all(|a| a.over_tcp() || a.started > w.started),
                "a race with a fair QUIC attempt taught nothing of QUIC:\n{}",
                run.timeline()
            ),
            (None, lesson) => prop_assert!(lesson.is_none(), "a race without a winner judged QUIC"),
            (Some(_), Some(other)) => prop_assert!(false, "not a QUIC lesson: {other:?}"),
        }
        // A QUIC attempt teaches its route nothing but a completed handshake's RTT.
        for l in run.lessons.iter().filter(|l| !l.kind.is_about_quic()) {
            let by_quic_only = run.attempts.iter().all(|a| a.target() != l.target || !a.over_tcp());
            if by_quic_only {
                prop_assert!(matches!(l.kind, LessonKind::Connected { .. }), "{l:?}\n{}", run.timeline());
            }
        }
    }
}
