//! What a user who drives the race without our driver can read and do: named timers
//! (issue 22 item 5), a race that can be cloned to look ahead, query names compared the way
//! DNS compares them, and an output for every step the driver must take.

mod common;
use common::*;

use fastfallback_plan::{FallbackPolicy, FastFallbackExchangeFinder, RaceInput, Timer};
use fastfallback_proto::{AttemptEvent, DnsAnswer, Instant, Output, QueryKind};
use fastfallback_route::{Address, Connectivity};

fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

fn race(address: &str) -> FastFallbackExchangeFinder {
    let addr = Address::parse(address).unwrap();
    let input = RaceInput::new(Connectivity::DUAL_STACK);
    FastFallbackExchangeFinder::new(addr, FallbackPolicy::default(), input, Instant::ZERO)
}

fn addresses(ips: &[&str]) -> DnsAnswer {
    DnsAnswer::Addresses(ips.iter().map(|ip| ip.parse().unwrap()).collect())
}

/// Every output the race has at `now`.
fn drain(race: &mut FastFallbackExchangeFinder, now: Instant) -> Vec<Output> {
    std::iter::from_fn(|| race.poll_output(now)).collect()
}

/// The IP address attempt `id` connects to, from the race's record of it.
fn target_ip(race: &FastFallbackExchangeFinder, id: fastfallback_proto::AttemptId) -> String {
    race.attempt(id).unwrap().plan.route.target.ip().to_string()
}

/// Every timer kind's reading, in [`Timer::ALL`] order.
fn timers(race: &FastFallbackExchangeFinder) -> Vec<(Timer, Option<Instant>)> {
    Timer::ALL.iter().map(|&t| (t, race.timer(t))).collect()
}

fn reading(pairs: &[(Timer, Option<u64>)]) -> Vec<(Timer, Option<Instant>)> {
    Timer::ALL
        .iter()
        .map(|&t| {
            let at = pairs.iter().find(|(k, _)| *k == t).and_then(|(_, at)| *at);
            (t, at.map(ms))
        })
        .collect()
}

#[test]
fn each_timer_kind_reads_its_own_deadline_and_poll_timeout_is_the_earliest() {
    // An ECH-capable race to an HTTPS origin (defaults: Resolution Delay 50, CAD 250, HTTPS
    // wait 150, attempt and connect timeouts 10 s, DNS tail 1 s).
    let mut race = race("https://example.com");
    drain(&mut race, ms(0));
    assert_eq!(timers(&race), reading(&[(Timer::Deadline, Some(10_000))]));

    // A at 10, AAAA and HTTPS pending: the Resolution Delay runs (RFC 8305 §3), and so does
    // the HTTPS wait after the first positive answer.
    race.handle_dns(QueryKind::A, &addresses(&[V4A]), Vec::new(), ms(10));
    assert!(drain(&mut race, ms(10)).is_empty());
    let expected = [
        (Timer::Deadline, Some(10_000)),
        (Timer::ResolutionDelay, Some(60)),
        (Timer::HttpsWait, Some(160)),
    ];
    assert_eq!(timers(&race), reading(&expected));
    assert_eq!(race.poll_timeout(), Some(ms(60)));

    // The Resolution Delay fires: v4a starts, bounded by its attempt timeout (capped by the
    // connect deadline). Nothing waits for the next-attempt timer, but its deadline is kept
    // for a later endpoint (P7): readable, not armed.
    race.handle_timeout(ms(60));
    let out = drain(&mut race, ms(60));
    assert!(matches!(&out[..], [Output::StartAttempt { .. }]), "{out:?}");
    let expected = [
        (Timer::Deadline, Some(10_000)),
        (Timer::AttemptTimeout, Some(10_000)),
        (Timer::HttpsWait, Some(160)),
        (Timer::NextAttempt, Some(310)),
    ];
    assert_eq!(timers(&race), reading(&expected));
    assert_eq!(race.next_attempt_timer(), None);
    assert_eq!(race.poll_timeout(), Some(ms(160)));

    // AAAA at 70 brings v6a: it waits for the next-attempt timer, 250 ms after v4a's start,
    // now armed.
    race.handle_dns(QueryKind::Aaaa, &addresses(&[V6A]), Vec::new(), ms(70));
    assert!(drain(&mut race, ms(70)).is_empty());
    let expected = [
        (Timer::Deadline, Some(10_000)),
        (Timer::AttemptTimeout, Some(10_000)),
        (Timer::HttpsWait, Some(160)),
        (Timer::NextAttempt, Some(310)),
    ];
    assert_eq!(timers(&race), reading(&expected));
    assert_eq!(race.next_attempt_timer(), Some(ms(310)));
    assert_eq!(race.poll_timeout(), Some(ms(160)));

    // v4a wins at 80 with the HTTPS answer still pending: only the DNS tail is left (HEv3 §6).
    let first = race.attempts()[0].id;
    race.handle_attempt(first, AttemptEvent::Connected(None), ms(80));
    drain(&mut race, ms(80));
    assert_eq!(timers(&race), reading(&[(Timer::DnsTail, Some(1_080))]));
    assert_eq!(race.poll_timeout(), Some(ms(1_080)));
}

/// What can be seen of a race from outside, to compare two.
fn state(race: &FastFallbackExchangeFinder) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?}",
        race.phase(),
        race.attempts(),
        timers(race),
        race.pending_queries(),
        race.endpoint_order()
    )
}

/// The inputs after the start of a dual-stack race: A at 10 and v4a at the Resolution Delay,
/// AAAA at 70, v6a at the next-attempt timer, refused, and v6b at once, which wins.
fn drive(race: &mut FastFallbackExchangeFinder) -> Vec<(u64, Output)> {
    let mut log = Vec::new();
    let mut at = |race: &mut FastFallbackExchangeFinder, t: u64| {
        race.handle_timeout(ms(t));
        log.extend(drain(race, ms(t)).into_iter().map(|o| (t, o)));
    };
    race.handle_dns(QueryKind::A, &addresses(&[V4A]), Vec::new(), ms(10));
    at(race, 10);
    at(race, 60);
    let first = race.attempts()[0].id;
    race.handle_dns(QueryKind::Aaaa, &addresses(&[V6A, V6B]), Vec::new(), ms(70));
    at(race, 70);
    at(race, 310);
    let second = race.attempts()[1].id;
    let refused = fastfallback_proto::AttemptError::new(
        fastfallback_proto::AttemptErrorKind::Refused,
        fastfallback_proto::Phase::Tcp,
        "refused",
    );
    race.handle_attempt(
        second,
        AttemptEvent::Failed {
            error: refused,
            follow_up: None,
        },
        ms(330),
    );
    at(race, 330);
    let third = race.attempts()[2].id;
    race.handle_attempt(third, AttemptEvent::Connected(None), ms(350));
    at(race, 350);
    assert_ne!(first, third);
    log
}

#[test]
fn a_cloned_race_fed_the_same_inputs_gives_the_same_outputs_and_leaves_the_original_alone() {
    let mut original = race("tcp://example.com:80");
    let start = drain(&mut original, ms(0));
    assert_eq!(start.len(), 2, "AAAA and A go out: {start:?}");
    let before = state(&original);

    let mut ahead = original.clone();
    let seen = drive(&mut ahead);
    assert!(
        matches!(seen.last(), Some((350, Output::Done(_)))),
        "the look-ahead ran to the win: {seen:?}"
    );
    let starts: Vec<u64> = seen
        .iter()
        .filter(|(_, o)| matches!(o, Output::StartAttempt { .. }))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(starts, [60, 310, 330]);
    // Driving the copy did not move the original.
    assert_eq!(state(&original), before);
    assert_eq!(original.poll_output(ms(0)), None);

    let lived = drive(&mut original);
    assert_eq!(lived, seen);
    assert_eq!(state(&original), state(&ahead));
}

#[test]
fn an_answer_for_a_target_name_in_capitals_with_a_trailing_dot_is_taken_for_the_query() {
    // RFC 4343 §2 and RFC 1034 §3.1: "SVC.Example." and "svc.example" are one name. The
    // origin aliases to svc.example (RFC 9460 §2.4.2); its addresses, handed in under the
    // other spelling (through `Query::target` and as a name built by hand), end the chain at
    // 20, and v6b starts then, inside the Resolution Delay the origin's AAAA began at 5.
    use fastfallback_proto::{HttpsRecord, Query, QueryName};
    use std::sync::Arc;
    let mut race = race("https://example.com");
    drain(&mut race, ms(0));
    race.handle_dns(QueryKind::Aaaa, &addresses(&[V6A]), Vec::new(), ms(5));
    race.handle_dns(QueryKind::A, &addresses(&[]), Vec::new(), ms(5));
    let alias = HttpsRecord {
        priority: 0,
        target: "svc.example.".into(),
        ..Default::default()
    };
    race.handle_dns(
        QueryKind::Https,
        &DnsAnswer::Https(vec![alias]),
        Vec::new(),
        ms(10),
    );
    let asked: Vec<String> = drain(&mut race, ms(10))
        .iter()
        .filter_map(|o| match o {
            Output::StartQuery(q) => Some(q.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        asked,
        ["HTTPS svc.example", "AAAA svc.example", "A svc.example"]
    );
    let none = DnsAnswer::Https(Vec::new());
    race.handle_dns(
        Query::target(QueryKind::Https, "SVC.EXAMPLE"),
        &none,
        Vec::new(),
        ms(20),
    );
    let by_hand = Query {
        kind: QueryKind::Aaaa,
        name: QueryName::Target(Arc::new("SVC.Example.".into())),
    };
    race.handle_dns(by_hand, &addresses(&[V6B]), Vec::new(), ms(20));
    race.handle_dns(
        Query::target(QueryKind::A, "Svc.Example."),
        &addresses(&[]),
        Vec::new(),
        ms(20),
    );
    assert!(
        race.pending_queries().is_empty(),
        "{:?}",
        race.pending_queries()
    );
    let out = drain(&mut race, ms(20));
    let started: Vec<String> = out
        .iter()
        .filter_map(|o| match o {
            Output::StartAttempt { id } => Some(target_ip(&race, *id)),
            _ => None,
        })
        .collect();
    assert_eq!(started, [V6B], "{out:?}");
}

/// A race to `address` through `proxy`, if any, and its first attempt's id, started at 0.
fn one_attempt(
    address: &str,
    proxy: bool,
) -> (FastFallbackExchangeFinder, fastfallback_proto::AttemptId) {
    use fastfallback_route::{Host, Proxy};
    let mut addr = Address::parse(address).unwrap();
    if proxy {
        addr = addr.with_proxy(Proxy::http(Host::Ip("192.0.2.9".parse().unwrap()), 3128));
    }
    let input = RaceInput::new(Connectivity::DUAL_STACK);
    let mut race =
        FastFallbackExchangeFinder::new(addr, FallbackPolicy::default(), input, Instant::ZERO);
    let out = drain(&mut race, ms(0));
    let [Output::StartAttempt { id }] = out[..] else {
        panic!("one start: {out:?}");
    };
    assert!(!race.attempt(id).unwrap().plan.hold_tls);
    (race, id)
}

#[test]
fn tls_may_start_as_soon_as_tcp_is_done_on_a_plan_that_does_not_hold_it() {
    use fastfallback_plan::AttemptState;
    let (mut race, id) = one_attempt("https://[2001:db8::a]", false);
    race.handle_attempt(id, AttemptEvent::TcpConnected, ms(30));
    assert_eq!(drain(&mut race, ms(30)), [Output::StartTls(id)]);
    assert_eq!(race.attempt(id).unwrap().state, AttemptState::Securing);
    // Said once: a repeated report changes nothing.
    race.handle_attempt(id, AttemptEvent::TcpConnected, ms(31));
    assert_eq!(drain(&mut race, ms(31)), []);
}

#[test]
fn a_plan_without_tls_is_never_told_to_start_it() {
    let (mut race, id) = one_attempt("tcp://[2001:db8::a]:80", false);
    race.handle_attempt(id, AttemptEvent::TcpConnected, ms(30));
    assert_eq!(drain(&mut race, ms(30)), []);
    let (mut race, id) = one_attempt("http://[2001:db8::a]", true);
    race.handle_attempt(id, AttemptEvent::TcpConnected, ms(30));
    race.handle_attempt(id, AttemptEvent::TunnelOpen, ms(40));
    assert_eq!(drain(&mut race, ms(40)), []);
}

#[test]
fn through_a_proxy_tls_may_start_once_the_tunnel_is_open_not_at_tcp() {
    let (mut race, id) = one_attempt("https://[2001:db8::a]", true);
    race.handle_attempt(id, AttemptEvent::TcpConnected, ms(30));
    assert_eq!(drain(&mut race, ms(30)), []);
    race.handle_attempt(id, AttemptEvent::TunnelOpen, ms(45));
    assert_eq!(drain(&mut race, ms(45)), [Output::StartTls(id)]);
}

#[test]
fn a_held_plan_goes_on_by_its_resume_not_by_start_tls() {
    // the ClientHello waits for the HTTPS answer; the resume says TLS may start.
    let mut race = race("https://example.com");
    drain(&mut race, ms(0));
    race.handle_dns(QueryKind::A, &addresses(&[V4A]), Vec::new(), ms(10));
    race.handle_timeout(ms(60));
    let out = drain(&mut race, ms(60));
    let [Output::StartAttempt { id }] = out[..] else {
        panic!("one start: {out:?}");
    };
    assert!(race.attempt(id).unwrap().plan.hold_tls);
    race.handle_attempt(id, AttemptEvent::TcpConnected, ms(80));
    assert_eq!(drain(&mut race, ms(80)), []);
    let nodata = DnsAnswer::Https(Vec::new());
    race.handle_dns(QueryKind::Https, &nodata, Vec::new(), ms(90));
    let out = drain(&mut race, ms(90));
    assert!(
        matches!(&out[..], [Output::ResumeAttempt { id: r, .. }] if *r == id),
        "{out:?}"
    );
}

/// A race to a name whose A answer (v4a) comes at 20 and AAAA is still pending: v4a starts at
/// the end of the Resolution Delay, 70, and the list has run out.
fn v4a_alone_at_70() -> FastFallbackExchangeFinder {
    let mut race = race("tcp://example.com:80");
    drain(&mut race, ms(0));
    race.handle_dns(QueryKind::A, &addresses(&[V4A]), Vec::new(), ms(20));
    race.handle_timeout(ms(70));
    let out = drain(&mut race, ms(70));
    assert!(matches!(&out[..], [Output::StartAttempt { .. }]), "{out:?}");
    race
}

#[test]
fn the_next_attempt_deadline_stays_readable_after_the_list_runs_out_while_it_bounds_a_late_start() {
    // T31 (P7): the deadline 70 + 250 = 320 is kept for an endpoint that comes later. It is
    // not armed (nothing waits for it, so nothing wakes up at 320), but `timer` reads it, and
    // it is when the late AAAA's v6a starts.
    let mut race = v4a_alone_at_70();
    race.handle_timeout(ms(100));
    assert_eq!(race.timer(Timer::NextAttempt), Some(ms(320)));
    assert_eq!(race.next_attempt_timer(), None, "not armed");
    assert_eq!(race.poll_timeout(), Some(ms(10_000)), "only the deadlines");
    race.handle_dns(QueryKind::Aaaa, &addresses(&[V6A]), Vec::new(), ms(150));
    assert!(drain(&mut race, ms(150)).is_empty());
    assert_eq!(race.timer(Timer::NextAttempt), Some(ms(320)));
    assert_eq!(race.poll_timeout(), Some(ms(320)), "armed now");
    race.handle_timeout(ms(320));
    let out = drain(&mut race, ms(320));
    assert!(
        matches!(out[..], [Output::StartAttempt { id }] if target_ip(&race, id) == V6A),
        "{out:?}"
    );
}

#[test]
fn the_kept_next_attempt_deadline_reads_none_once_the_latest_attempt_has_failed() {
    // P4: with the latest attempt gone, a late endpoint starts at once; nothing bounds it.
    let mut race = v4a_alone_at_70();
    let id = race.attempts()[0].id;
    let refused = fastfallback_proto::AttemptError::new(
        fastfallback_proto::AttemptErrorKind::Refused,
        fastfallback_proto::Phase::Tcp,
        "refused",
    );
    let failed = AttemptEvent::Failed {
        error: refused,
        follow_up: None,
    };
    race.handle_attempt(id, failed, ms(100));
    drain(&mut race, ms(100));
    assert_eq!(race.timer(Timer::NextAttempt), None);
    race.handle_dns(QueryKind::Aaaa, &addresses(&[V6A]), Vec::new(), ms(150));
    let out = drain(&mut race, ms(150));
    assert!(matches!(&out[..], [Output::StartAttempt { .. }]), "{out:?}");
}
