//! Property tests of the race's invariants over random scenarios:
//! - no attempt starts after success;
//! - every attempt ends exactly once;
//! - no more attempts are in flight than the cap allows;
//! - starts are never closer than 10 ms, and the race never asks to be woken in the past;
//! - the race always ends, by the overall deadline at the latest.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use fastfallback_plan::WinAt;
use fastfallback_proto::{AttemptErrorKind, AttemptId};
use fastfallback_sim::{Behaviour, Event, Scenario};
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
    )
        .prop_map(
            |(v6, v4, aaaa_at, a_at, cap, delay, tls, win_at_tcp, pooled_at)| Case {
                v6,
                v4,
                aaaa_at,
                a_at,
                cap,
                delay,
                tls,
                win_at_tcp,
                pooled_at,
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
    });
    let v6: Vec<String> = (0..c.v6.len())
        .map(|i| format!("2001:db8::{}", i + 1))
        .collect();
    let v4: Vec<String> = (0..c.v4.len())
        .map(|i| format!("192.0.2.{}", i + 1))
        .collect();
    for (a, b) in v6.iter().zip(&c.v6).chain(v4.iter().zip(&c.v4)) {
        s = s.behave(a, b.clone());
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

        // Starts are at least 10 ms apart (RFC 8305 §5).
        for w in starts.windows(2) {
            prop_assert!(w[1] >= w[0] + 10, "starts {w:?} closer than 10 ms");
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
            prop_assert!(a.outcome.is_some(), "attempt {} never ended:\n{}", a.id, run.timeline());
            prop_assert!(ends.get(&a.id).copied().unwrap_or(0) <= 1, "attempt {} ended twice", a.id);
        }

        // Never more in flight than the cap.
        prop_assert!(run.peak_in_flight <= c.cap);

        // Deadlines never go backwards past `now`.
        prop_assert_eq!(run.past_deadlines, 0);

        // Nothing but the winner stays open.
        let won_by_attempt = run.won().is_some();
        prop_assert_eq!(run.open_sockets, usize::from(won_by_attempt));
    }
}
