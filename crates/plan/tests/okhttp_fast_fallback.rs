//! OkHttp's FastFallbackExchangeFinderTest scenarios (spec/okhttp-connection-layer.md §5.1),
//! run in OkHttp's mode: the first TCP connect wins and does TLS alone (`WinAt::Tcp`).
//!
//! Plans p0, p1, ... are the IPv4 routes 192.0.2.1, .2, ... in DNS order (no IPv6, so no
//! interleaving). Where OkHttp launches the next plan "at once" after a failure, so do we
//! (reference profile P4: the 10 ms floor of RFC 8305 §5 bounds the Connection Attempt Delay,
//! not a start after the latest attempt failed). `StartFloor::EveryStart` keeps the literal
//! 10 ms reading; one test below shows it.

mod common;
use common::*;

use std::net::SocketAddr;

use fastfallback_plan::WinAt;
use fastfallback_proto::{AttemptErrorKind, RaceErrorKind};
use fastfallback_sim::{Behaviour, Scenario};

const P: [&str; 5] = [
    "192.0.2.1",
    "192.0.2.2",
    "192.0.2.3",
    "192.0.2.4",
    "192.0.2.5",
];

fn plans(n: usize) -> Scenario {
    Scenario::https()
        .tune(|p| {
            p.win_at = WinAt::Tcp;
            p.query_https = false;
        })
        .aaaa(0, &[])
        .a(0, &P[..n])
}

fn tcp_tls(tcp: u64, tls: u64) -> Behaviour {
    Behaviour::Ok { tcp, tls }
}

fn sock(ip: &str) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), 443)
}

#[test]
fn connecting_plan_wins_alone_without_a_second_launch() {
    // FF-2
    let run = plans(1).behave(P[0], tcp_tls(240, 0)).run();
    assert_eq!(run.starts(), at(&[(P[0], 0)]));
    assert_eq!(run.won(), one(P[0], 240));
}

#[test]
fn first_plan_connecting_before_second_cancels_it() {
    // FF-3
    let run = plans(2)
        .behave(P[0], tcp_tls(260, 0))
        .behave(P[1], tcp_tls(20, 0))
        .run();
    assert_eq!(run.starts(), at(&[(P[0], 0), (P[1], 250)]));
    assert_eq!(run.cancelled(), at(&[(P[1], 260)]));
    assert_eq!(run.won(), one(P[0], 260));
}

#[test]
fn pooled_connection_mid_race_wins_and_cancels_in_flight_plan() {
    // FF-4, and better than OkHttp: the pool is not only checked at launch ticks.
    let run = plans(2).behave(P[0], tcp_tls(260, 0)).pooled_at(250).run();
    assert_eq!(run.wins(), at(&[("pooled", 250)]));
    assert_eq!(run.cancelled(), at(&[(P[0], 250)]));
    assert_eq!(
        run.starts(),
        at(&[(P[0], 0)]),
        "the pooled connection beats the 250 ms launch"
    );
}

#[test]
fn second_plan_connecting_first_wins() {
    // FF-5
    let run = plans(2)
        .behave(P[0], tcp_tls(270, 0))
        .behave(P[1], tcp_tls(10, 0))
        .run();
    assert_eq!(run.won(), one(P[1], 260));
    assert_eq!(run.cancelled(), at(&[(P[0], 260)]));
}

#[test]
fn pooled_connection_cancels_every_plan_in_launch_order() {
    // FF-6
    let run = plans(3)
        .behave(P[0], tcp_tls(520, 0))
        .behave(P[1], tcp_tls(260, 0))
        .drop(P[2])
        .pooled_at(500)
        .run();
    assert_eq!(run.cancelled(), at(&[(P[0], 500), (P[1], 500)]));
    assert_eq!(run.wins(), at(&[("pooled", 500)]));
}

#[test]
fn second_exchange_launches_the_race_losers_retry_at_once() {
    // FF-8
    let run = plans(2)
        .behave(P[0], tcp_tls(270, 0))
        .behave(P[0], tcp_tls(20, 0))
        .behave(P[1], tcp_tls(10, 0))
        .exchanges(2)
        .run();
    assert_eq!(run.wins(), at(&[(P[1], 260), (P[0], 280)]));
    assert_eq!(run.starts(), at(&[(P[0], 0), (P[1], 250), (P[0], 260)]));
}

#[test]
fn only_plan_failing_fails_the_race_with_its_error() {
    // FF-9
    let run = plans(1).refuse(P[0], 0).run();
    let (err, t) = run.failed().unwrap();
    assert_eq!((err.kind, t), (RaceErrorKind::AllAttemptsFailed, 0));
    assert_eq!(err.primary().unwrap().error.kind, AttemptErrorKind::Refused);
}

#[test]
fn failed_first_plan_launches_second_at_once() {
    // FF-10, as OkHttp does it (P4).
    let run = plans(2).refuse(P[0], 0).ok(P[1], 0).run();
    assert_eq!(run.starts(), at(&[(P[0], 0), (P[1], 0)]));
    assert_eq!(run.won(), one(P[1], 0));
}

#[test]
fn failed_first_plan_launches_second_after_10ms_with_the_literal_floor() {
    // FF-10 under StartFloor::EveryStart: no two starts within 10 ms (RFC 8305 §5, read
    // literally).
    let run = plans(2)
        .tune(|p| p.start_floor = fastfallback_plan::StartFloor::EveryStart)
        .refuse(P[0], 0)
        .ok(P[1], 0)
        .run();
    assert_eq!(run.starts(), at(&[(P[0], 0), (P[1], 10)]));
    assert_eq!(run.won(), one(P[1], 10));
}

#[test]
fn two_failures_are_both_reported_in_start_order() {
    // FF-11: OkHttp's primary + one suppressed becomes an ordered list.
    let run = plans(2).refuse(P[0], 0).refuse(P[1], 0).run();
    let (err, _) = run.failed().unwrap();
    let addrs: Vec<SocketAddr> = err.attempts.iter().map(|a| a.addr).collect();
    assert_eq!(addrs, [sock(P[0]), sock(P[1])]);
}

#[test]
fn losers_retry_launches_when_the_winners_tls_fails() {
    // FF-15
    let run = plans(2)
        .behave(P[0], tcp_tls(270, 0))
        .behave(P[0], tcp_tls(0, 0))
        .behave(
            P[1],
            Behaviour::TlsFail {
                tcp: 10,
                tls: 0,
                follow_up: None,
            },
        )
        .run();
    assert_eq!(run.starts(), at(&[(P[0], 0), (P[1], 250), (P[0], 260)]));
    assert_eq!(run.cancelled(), at(&[(P[0], 260)]));
    assert_eq!(run.won(), one(P[0], 260));
}

#[test]
fn losing_plan_never_starts_tls() {
    // FF-16
    let run = plans(2)
        .behave(P[0], tcp_tls(270, 0))
        .behave(P[1], tcp_tls(10, 20))
        .run();
    assert_eq!(run.cancelled(), at(&[(P[0], 260)]));
    assert_eq!(run.won(), one(P[1], 280));
    assert_eq!(
        run.attempts[0].tcp_connected, None,
        "p0 never reached TCP, so never TLS"
    );
}

#[test]
fn follow_up_from_tcp_is_used_and_not_counted_as_an_error() {
    // FF-17
    let run = plans(1)
        .behave(
            P[0],
            Behaviour::FollowUp {
                after: 0,
                to: sock(P[1]),
            },
        )
        .ok(P[1], 0)
        .run();
    assert_eq!(run.starts(), at(&[(P[0], 0), (P[1], 0)]));
    assert_eq!(run.won(), one(P[1], 0));
    assert_eq!(run.attempts[1].plan.attempt, 1);
    assert!(run.failures().is_empty());
}

#[test]
fn follow_up_from_tls_failure_runs_next() {
    // FF-18
    let run = plans(1)
        .behave(
            P[0],
            Behaviour::TlsFail {
                tcp: 0,
                tls: 0,
                follow_up: Some(sock(P[1])),
            },
        )
        .ok(P[1], 0)
        .run();
    assert_eq!(run.starts(), at(&[(P[0], 0), (P[1], 0)]));
    assert_eq!(run.won(), one(P[1], 0));
}

#[test]
fn tls_follow_up_runs_before_the_losers_retry_and_the_stagger_applies_again() {
    // FF-19
    let run = plans(2)
        .behave(P[0], tcp_tls(280, 0))
        .behave(P[0], tcp_tls(10, 0))
        .behave(
            P[1],
            Behaviour::TlsFail {
                tcp: 10,
                tls: 10,
                follow_up: Some(sock(P[2])),
            },
        )
        .behave(P[2], tcp_tls(270, 0))
        .run();
    assert_eq!(
        run.starts(),
        at(&[(P[0], 0), (P[1], 250), (P[2], 270), (P[0], 520)])
    );
    assert_eq!(run.cancelled(), at(&[(P[0], 260), (P[2], 530)]));
    assert_eq!(run.won(), one(P[0], 530));
}

#[test]
fn only_the_latest_failure_advances_the_launch() {
    // FF-20
    let run = plans(5)
        .refuse(P[0], 510)
        .refuse(P[1], 270)
        .refuse(P[2], 30)
        .behave(P[3], tcp_tls(270, 0))
        .behave(P[4], tcp_tls(10, 0))
        .run();
    assert_eq!(
        run.starts(),
        at(&[
            (P[0], 0),
            (P[1], 250),
            (P[2], 500),
            (P[3], 530),
            (P[4], 780)
        ])
    );
    assert_eq!(run.won(), one(P[4], 790));
    assert_eq!(run.cancelled(), at(&[(P[3], 790)]));
}

#[test]
fn pooled_connection_beats_a_tcp_result_in_the_same_instant() {
    // FF-21 (#7152)
    let run = plans(2).behave(P[0], tcp_tls(250, 0)).pooled_at(250).run();
    assert_eq!(run.wins(), at(&[("pooled", 250)]));
    assert_eq!(run.cancelled(), at(&[(P[0], 250)]));
}

#[test]
fn stale_result_of_a_cancelled_plan_is_ignored() {
    // OkHttp §2.8: a loser's late result must not count.
    use fastfallback_plan::{AttemptState, FallbackPolicy, FastFallbackExchangeFinder, RaceInput};
    use fastfallback_proto::{AttemptEvent, CancelReason, DnsAnswer, Instant, Output, QueryKind};
    use fastfallback_route::{Address, Connectivity};
    let mut race = FastFallbackExchangeFinder::new(
        Address::parse("tcp://example.com:443").unwrap(),
        FallbackPolicy::default(),
        RaceInput::new(Connectivity::DUAL_STACK),
        Instant::ZERO,
    );
    let t = Instant::ZERO;
    let answer = |ip: &str| DnsAnswer::Addresses(vec![ip.parse().unwrap()]);
    race.handle_dns(QueryKind::Aaaa, &answer(V6A), Vec::new(), t);
    race.handle_dns(QueryKind::A, &answer(V4A), Vec::new(), t);
    let drain = |race: &mut FastFallbackExchangeFinder, now: Instant| {
        if race.poll_timeout().is_some_and(|d| d <= now) {
            race.handle_timeout(now);
        }
        std::iter::from_fn(|| race.poll_output(now)).collect::<Vec<_>>()
    };
    let started = |outs: Vec<Output>| {
        outs.into_iter().find_map(|o| match o {
            Output::StartAttempt { id } => Some(id),
            _ => None,
        })
    };
    let v6 = started(drain(&mut race, t)).unwrap();
    let v4 = started(drain(&mut race, Instant::from_millis(250))).unwrap();
    race.handle_attempt(v4, AttemptEvent::Connected(None), Instant::from_millis(260));
    let outs = drain(&mut race, Instant::from_millis(260));
    assert!(matches!(outs.last(), Some(Output::Done(_))));
    // The cancelled v6 attempt reports success late: nothing happens.
    race.handle_attempt(v6, AttemptEvent::Connected(None), Instant::from_millis(270));
    assert_eq!(race.poll_output(Instant::from_millis(270)), None);
    assert!(matches!(
        race.attempt(v6).unwrap().state,
        AttemptState::Cancelled {
            reason: CancelReason::LostRace,
            ..
        }
    ));
}
