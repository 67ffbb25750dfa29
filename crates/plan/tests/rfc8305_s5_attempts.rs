//! RFC 8305 §5 and HEv3 §6: pacing attempts, racing, success and failure.
//! Conformance cases T11–T21, T47, T49–T55 of spec/happy-eyeballs-standards.md §3.B and §3.G.

mod common;
use common::*;

use std::sync::Arc;
use std::time::Duration;

use fastfallback_proto::{AttemptErrorKind, RaceErrorKind};
use fastfallback_route::{RouteDatabase, RouteMemory};
use fastfallback_sim::Scenario;

fn both_at_10() -> Scenario {
    Scenario::plain().aaaa(10, &[V6A]).a(10, &[V4A])
}

#[test]
fn v6_blackhole_starts_v4_after_attempt_delay() {
    // T11
    let run = both_at_10().drop(V6A).ok(V4A, 20).run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 260)]));
    assert_eq!(run.won(), one(V4A, 280));
    assert_eq!(run.cancelled(), at(&[(V6A, 280)]));
    assert_eq!(run.open_sockets, 1, "only the winner stays open");
}

#[test]
fn v6_refused_quickly_starts_v4_at_once() {
    // T12
    let run = both_at_10().refuse(V6A, 15).ok(V4A, 20).run();
    assert_eq!(run.failures(), at(&[(V6A, 25)]));
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 25)]));
    assert_eq!(run.won(), one(V4A, 45));
    let v6 = &run.attempts[0];
    assert!(matches!(
        &v6.state,
        fastfallback_plan::AttemptState::Failed(e) if e.kind == AttemptErrorKind::Refused
    ));
}

#[test]
fn both_slow_ipv6_wins_and_starting_ipv4_does_not_disturb_it() {
    // T13
    let run = both_at_10().ok(V6A, 400).ok(V4A, 300).run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 260)]));
    assert_eq!(run.won(), one(V6A, 410));
    assert_eq!(run.cancelled(), at(&[(V4A, 410)]));
}

#[test]
fn both_slow_ipv4_wins_and_ipv6_is_cancelled() {
    // T14
    let run = both_at_10().ok(V6A, 600).ok(V4A, 100).run();
    assert_eq!(run.won(), one(V4A, 360));
    assert_eq!(run.cancelled(), at(&[(V6A, 360)]));
}

#[test]
fn three_and_three_interleave_every_attempt_delay() {
    // T15
    let run = Scenario::plain()
        .connect_timeout(5000)
        .aaaa(10, &[V6A, V6B, V6C])
        .a(10, &[V4A, V4B, V4C])
        .ok(V4C, 10)
        .run();
    assert_eq!(
        run.starts(),
        at(&[
            (V6A, 10),
            (V4A, 260),
            (V6B, 510),
            (V4B, 760),
            (V6C, 1010),
            (V4C, 1260)
        ])
    );
    assert_eq!(run.won(), one(V4C, 1270));
    assert_eq!(
        run.cancelled(),
        at(&[
            (V6A, 1270),
            (V4A, 1270),
            (V6B, 1270),
            (V4B, 1270),
            (V6C, 1270)
        ])
    );
}

#[test]
fn preferred_family_count_two_lets_two_ipv6_go_first() {
    // T16
    let run = Scenario::plain()
        .connect_timeout(5000)
        .tune(|p| p.preferred_family_count = 2)
        .aaaa(10, &[V6A, V6B, V6C])
        .a(10, &[V4A, V4B, V4C])
        .ok(V4C, 10)
        .run();
    assert_eq!(
        run.starts(),
        at(&[
            (V6A, 10),
            (V6B, 260),
            (V4A, 510),
            (V6C, 760),
            (V4B, 1010),
            (V4C, 1260)
        ])
    );
    assert_eq!(run.won(), one(V4C, 1270));
}

#[test]
fn unbalanced_families_append_the_remaining_ipv6() {
    // T17
    let run = Scenario::plain()
        .connect_timeout(5000)
        .aaaa(10, &[V6A, V6B, V6C, V6D])
        .a(10, &[V4A])
        .ok(V6D, 10)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 260), (V6B, 510), (V6C, 760), (V6D, 1010)])
    );
    assert_eq!(run.won(), one(V6D, 1020));
}

#[test]
fn failure_mid_delay_advances_at_once_and_rearms_the_timer() {
    // T18
    let run = Scenario::plain()
        .aaaa(10, &[V6A, V6B])
        .a(10, &[V4A, V4B])
        .refuse(V6A, 100)
        .ok(V4B, 10)
        .run();
    assert_eq!(run.failures(), at(&[(V6A, 110)]));
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 110), (V6B, 360), (V4B, 610)])
    );
    assert_eq!(run.won(), one(V4B, 620));
}

#[test]
fn all_attempts_failed_reports_every_cause_in_start_order() {
    // T19
    let run = Scenario::plain()
        .aaaa(10, &[V6A, V6B])
        .a(10, &[V4A])
        .refuse(V6A, 30)
        .refuse(V6B, 30)
        .refuse(V4A, 30)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 40), (V6B, 70)]));
    let (err, t) = run.failed().expect("race fails");
    assert_eq!((err.kind, t), (RaceErrorKind::AllAttemptsFailed, 100));
    let causes: Vec<(String, AttemptErrorKind)> = err
        .attempts
        .iter()
        .map(|a| (a.addr.ip().to_string(), a.error.kind))
        .collect();
    assert_eq!(
        causes,
        [
            (V6A.to_owned(), AttemptErrorKind::Refused),
            (V4A.to_owned(), AttemptErrorKind::Refused),
            (V6B.to_owned(), AttemptErrorKind::Refused)
        ]
    );
    assert_eq!(run.open_sockets, 0);
}

#[test]
fn every_address_blackholed_times_out_at_the_deadline_and_closes_all() {
    // T20
    let run = Scenario::plain()
        .connect_timeout(2000)
        .aaaa(10, &[V6A, V6B])
        .a(10, &[V4A, V4B])
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 260), (V6B, 510), (V4B, 760)])
    );
    let (err, t) = run.failed().expect("race fails");
    assert_eq!((err.kind, t), (RaceErrorKind::TimedOut, 2000));
    assert_eq!(err.attempts.len(), 4);
    assert_eq!(run.cancelled().len(), 4);
    assert!(run.cancelled().iter().all(|(_, t)| *t == 2000));
    assert_eq!(run.open_sockets, 0);
}

#[test]
fn no_next_attempt_timer_once_the_list_is_exhausted() {
    // T20: after the last start only the deadline remains.
    use fastfallback_plan::{FallbackPolicy, FastFallbackExchangeFinder, RaceInput};
    use fastfallback_proto::{DnsAnswer, Instant, QueryKind};
    use fastfallback_route::{Address, Connectivity};
    let policy = FallbackPolicy::builder()
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let addr = Address::parse("tcp://example.com:443").unwrap();
    let input = RaceInput::new(Connectivity::DUAL_STACK);
    let mut race = FastFallbackExchangeFinder::new(addr, policy, input, Instant::ZERO);
    let t10 = Instant::from_millis(10);
    let answer = |ip: &str| DnsAnswer::Addresses(vec![ip.parse().unwrap()]);
    race.handle_dns(QueryKind::Aaaa, &answer(V6A), Vec::new(), t10);
    race.handle_dns(QueryKind::A, &answer(V4A), Vec::new(), t10);
    while race.poll_output(t10).is_some() {}
    assert_eq!(race.next_attempt_timer(), Some(Instant::from_millis(260)));
    let t260 = Instant::from_millis(260);
    // The timer fires explicitly (quinn-proto's handle_timeout), then the race acts.
    assert_eq!(race.poll_timeout(), Some(t260));
    race.handle_timeout(t260);
    while race.poll_output(t260).is_some() {}
    assert_eq!(race.next_attempt_timer(), None);
    assert_eq!(race.poll_timeout(), Some(Instant::from_millis(2000)));
    // P7: the deadline 260 + 250 is kept, and read by name, for an endpoint that may come
    // later; it wakes nothing up, and bounds nothing once it has passed.
    use fastfallback_plan::Timer;
    assert_eq!(
        race.timer(Timer::NextAttempt),
        Some(Instant::from_millis(510))
    );
    race.handle_timeout(Instant::from_millis(510));
    assert_eq!(race.timer(Timer::NextAttempt), None);
    assert_eq!(race.poll_timeout(), Some(Instant::from_millis(2000)));
}

#[test]
fn slow_first_attempt_loses_to_fast_second() {
    // T21
    let run = both_at_10().ok(V6A, 300).ok(V4A, 20).run();
    assert_eq!(run.won(), one(V4A, 280));
    assert_eq!(run.cancelled(), at(&[(V6A, 280)]));
}

fn with_history(srtt_ms: u64) -> Scenario {
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    remember_rtt(
        &db,
        "tcp://example.com:443",
        &format!("[{V6A}]:443"),
        srtt_ms,
    );
    both_at_10().memory(db).drop(V6A).ok(V4A, 10)
}

#[test]
fn history_of_2ms_is_clamped_up_to_the_100ms_minimum() {
    // T47 (a)
    let run = with_history(2).run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 110)]));
    assert_eq!(run.won(), one(V4A, 120));
}

#[test]
fn history_of_3s_is_clamped_down_to_the_2s_maximum() {
    // T47 (b)
    let run = with_history(3000).run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 2010)]));
}

#[test]
fn history_formula_inside_the_clamp_gives_three_srtt() {
    // T54
    let run = with_history(50).run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 160)]));
    assert_eq!(run.won(), one(V4A, 170));
    assert_eq!(run.cancelled(), at(&[(V6A, 170)]));
}

#[test]
fn configured_delay_of_10ms_keeps_starts_at_least_10ms_apart() {
    // T47 (c), with the smallest delay the builder accepts.
    let run = Scenario::plain()
        .tune(|p| {
            p.attempt_delay = Duration::from_millis(10);
            p.min_attempt_delay = Duration::from_millis(10);
        })
        .aaaa(10, &[V6A, V6B])
        .a(10, &[V4A, V4B])
        .ok(V4B, 5)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 20), (V6B, 30), (V4B, 40)])
    );
}

#[test]
fn latest_attempt_failing_advances_even_with_an_older_one_in_flight() {
    // T49
    let run = Scenario::plain()
        .aaaa(10, &[V6A, V6B])
        .a(10, &[V4A])
        .refuse(V4A, 20)
        .ok(V6B, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 260), (V6B, 280)]));
    assert_eq!(run.won(), one(V6B, 300));
    assert_eq!(run.cancelled(), at(&[(V6A, 300)]));
}

#[test]
fn pafc_two_applies_at_the_head_only() {
    // T50
    let run = Scenario::plain()
        .connect_timeout(5000)
        .tune(|p| p.preferred_family_count = 2)
        .aaaa(10, &[V6A, V6B, V6C, V6D])
        .a(10, &[V4A, V4B])
        .ok(V6D, 10)
        .run();
    assert_eq!(
        run.starts(),
        at(&[
            (V6A, 10),
            (V6B, 260),
            (V4A, 510),
            (V6C, 760),
            (V4B, 1010),
            (V6D, 1260)
        ])
    );
    assert_eq!(run.won(), one(V6D, 1270));
    assert_eq!(run.cancelled().len(), 5);
}

#[test]
fn older_attempt_failing_does_not_advance() {
    // T52
    let run = Scenario::plain()
        .aaaa(10, &[V6A, V6B])
        .a(10, &[V4A])
        .refuse(V6A, 300)
        .ok(V6B, 20)
        .run();
    assert_eq!(run.failures(), at(&[(V6A, 310)]));
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 260), (V6B, 510)]));
    assert_eq!(run.won(), one(V6B, 530));
    assert_eq!(run.cancelled(), at(&[(V4A, 530)]));
}

#[test]
fn endpoint_arriving_after_latest_failure_starts_at_once() {
    // T53
    let run = Scenario::plain()
        .aaaa(10, &[V6A, V6B])
        .a(400, &[V4A])
        .refuse(V6B, 20)
        .ok(V4A, 10)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V6B, 260), (V4A, 400)]));
    assert_eq!(run.won(), one(V4A, 410));
    assert_eq!(run.cancelled(), at(&[(V6A, 410)]));
}

#[test]
fn concurrent_attempt_cap_evicts_the_oldest_to_make_room() {
    // curl's case 10 shape: 8 blackholed IPv6 and one IPv4 that works late in the list.
    let v6: Vec<String> = (1..=8).map(|i| format!("2001:db8::{i}")).collect();
    let v6: Vec<&str> = v6.iter().map(String::as_str).collect();
    let run = Scenario::plain()
        .connect_timeout(10_000)
        .tune(|p| p.max_concurrent_attempts = std::num::NonZeroUsize::new(3).unwrap())
        .tune(|p| p.family = fastfallback_plan::FamilyPreference::V6Only)
        .aaaa(10, &v6)
        .run();
    assert_eq!(run.peak_in_flight, 3);
    assert_eq!(run.starts().len(), 8);
    assert_eq!(run.starts()[3], ("2001:db8::4".to_owned(), 760));
    assert_eq!(run.cancelled()[0], ("2001:db8::1".to_owned(), 760));
}

#[test]
fn eight_blackholed_ipv6_still_try_ipv4_by_the_first_delay() {
    // design.md performance table: "8 IPv6 blackholed, 1 IPv4: IPv4 tried by 250 ms".
    let v6: Vec<String> = (1..=8).map(|i| format!("2001:db8::{i}")).collect();
    let v6: Vec<&str> = v6.iter().map(String::as_str).collect();
    let run = Scenario::plain()
        .aaaa(0, &v6)
        .a(0, &[V4A])
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[("2001:db8::1", 0), (V4A, 250)]));
    assert_eq!(run.won(), one(V4A, 270));
}

#[test]
fn per_attempt_timeout_fails_the_attempt_and_moves_on() {
    let run = Scenario::plain()
        .tune(|p| p.attempt_timeout = Duration::from_millis(100))
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .ok(V4A, 20)
        .run();
    // v6a times out at 110: it was the latest attempt, so v4a starts at once (P4).
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 110)]));
    assert_eq!(run.cancelled(), at(&[(V6A, 110)]));
    assert_eq!(run.won(), one(V4A, 130));
}

fn refused_after_1ms() -> Scenario {
    Scenario::plain()
        .aaaa(10, &[V6A, V6B])
        .a(10, &[V4A, V4B])
        .refuse(V6A, 1)
        .drop(V6B)
        .drop(V4A)
        .ok(V4B, 10)
}

#[test]
fn latest_attempt_refused_after_1ms_starts_the_next_at_that_instant() {
    // T55 (a): no 10 ms floor on a failure-driven start (P4, R-27, R-30).
    let run = refused_after_1ms().run();
    assert_eq!(run.failures(), at(&[(V6A, 11)]));
    // v4a's start re-arms the timer: v6b at 261, not 260 (only 249 ms after v4a).
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 11), (V6B, 261), (V4B, 511)])
    );
    assert_eq!(run.won(), one(V4B, 521));
    assert_eq!(run.cancelled(), at(&[(V4A, 521), (V6B, 521)]));
}

#[test]
fn with_a_10ms_history_delay_timer_starts_stay_10ms_apart_after_a_failure_start() {
    // T55 (b): every CAD is clamp(3 × 2, 10, 2000) = 10.
    let db = Arc::new(RouteDatabase::new(RouteMemory::default()));
    for ip in [V6A, V6B, V4A, V4B] {
        let target = std::net::SocketAddr::new(ip.parse().unwrap(), 443);
        remember_rtt(&db, "tcp://example.com:443", &target.to_string(), 2);
    }
    let run = refused_after_1ms()
        .memory(db)
        .tune(|p| p.min_attempt_delay = Duration::from_millis(10))
        .run();
    assert_eq!(run.failures(), at(&[(V6A, 11)]));
    // v6b at 21: not 20 (9 ms after v4a), not 17 (the floor raises the computed 6 ms to 10).
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 11), (V6B, 21), (V4B, 31)])
    );
    assert_eq!(run.won(), one(V4B, 41));
}

#[test]
fn the_literal_floor_keeps_10ms_between_any_two_starts() {
    // StartFloor::EveryStart, the opt-in literal reading of RFC 8305 §5.
    let run = refused_after_1ms()
        .tune(|p| p.start_floor = fastfallback_plan::StartFloor::EveryStart)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 20), (V6B, 270), (V4B, 520)])
    );
    assert_eq!(run.won(), one(V4B, 530));
}
