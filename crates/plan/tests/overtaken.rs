//! A pooled connection that wins a race mid-connect overtakes the attempts in flight: the one
//! furthest along is cancelled as `Overtaken` (a pooling driver keeps it: its call found the
//! pool short of a connection), the rest as `LostRace`.

use fastfallback_plan::{FallbackPolicy, FastFallbackExchangeFinder, RaceInput};
use fastfallback_proto::{
    AttemptEvent, AttemptId, CancelReason, DnsAnswer, Instant, Output, PooledId, Query, QueryKind,
    Winner,
};
use fastfallback_route::{Address, Connectivity};

fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

/// A race to `origin.test` over IPv4 with two addresses, answered at 0: the first attempt
/// starts at 0, the second at the Connection Attempt Delay (250 ms).
fn two_attempts() -> (FastFallbackExchangeFinder, AttemptId, AttemptId) {
    let policy = FallbackPolicy::builder()
        .query_https(false)
        .build()
        .unwrap();
    let address = Address::parse("https://origin.test:443").unwrap();
    let mut race = FastFallbackExchangeFinder::new(
        address,
        policy,
        RaceInput::new(Connectivity {
            v6: false,
            ..Connectivity::DUAL_STACK
        }),
        ms(0),
    );
    while let Some(out) = race.poll_output(ms(0)) {
        assert!(matches!(out, Output::StartQuery(_)), "{out:?}");
    }
    let a = DnsAnswer::Addresses(vec![
        "192.0.2.1".parse().unwrap(),
        "192.0.2.2".parse().unwrap(),
    ]);
    race.handle_dns(Query::origin(QueryKind::A), &a, Vec::new(), ms(0));
    let first = started(&mut race, ms(0));
    let t = race.poll_timeout().expect("the next-attempt timer");
    race.handle_timeout(t);
    let second = started(&mut race, t);
    (race, first, second)
}

fn started(race: &mut FastFallbackExchangeFinder, now: Instant) -> AttemptId {
    match race.poll_output(now) {
        Some(Output::StartAttempt { id }) => id,
        other => panic!("expected a start, got {other:?}"),
    }
}

fn cancels(race: &mut FastFallbackExchangeFinder, now: Instant) -> Vec<(AttemptId, CancelReason)> {
    let mut cancelled = Vec::new();
    while let Some(out) = race.poll_output(now) {
        match out {
            Output::CancelAttempt { id, reason } => cancelled.push((id, reason)),
            Output::Done(Winner::Pooled(_)) => return cancelled,
            other => panic!("unexpected {other:?}"),
        }
    }
    panic!("the pooled connection did not win")
}

#[test]
fn a_pooled_winner_overtakes_the_attempt_whose_tcp_connected_and_cancels_the_other() {
    let (mut race, first, second) = two_attempts();
    race.handle_attempt(second, AttemptEvent::TcpConnected, ms(260));
    assert!(matches!(race.poll_output(ms(260)), Some(Output::StartTls(id)) if id == second));
    assert!(race.handle_pooled(PooledId(7), ms(270)));
    let mut got = cancels(&mut race, ms(270));
    got.sort_by_key(|(id, _)| *id);
    assert_eq!(
        got,
        [
            (first, CancelReason::LostRace),
            (second, CancelReason::Overtaken)
        ]
    );
}

#[test]
fn without_a_tcp_connect_a_pooled_winner_overtakes_the_attempt_started_last() {
    let (mut race, first, second) = two_attempts();
    assert!(race.handle_pooled(PooledId(7), ms(270)));
    let mut got = cancels(&mut race, ms(270));
    got.sort_by_key(|(id, _)| *id);
    assert_eq!(
        got,
        [
            (first, CancelReason::LostRace),
            (second, CancelReason::Overtaken)
        ]
    );
}

#[test]
fn an_attempt_that_wins_leaves_no_attempt_overtaken() {
    let (mut race, first, second) = two_attempts();
    race.handle_attempt(second, AttemptEvent::TcpConnected, ms(260));
    race.handle_attempt(second, AttemptEvent::Connected(None), ms(280));
    let mut got = Vec::new();
    while let Some(out) = race.poll_output(ms(280)) {
        if let Output::CancelAttempt { id, reason } = out {
            got.push((id, reason));
        }
    }
    assert_eq!(got, [(first, CancelReason::LostRace)]);
}
