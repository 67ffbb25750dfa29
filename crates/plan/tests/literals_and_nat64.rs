//! IP literals (T23–T25) and NAT64 (T26–T30, HEv3 §8) of spec/happy-eyeballs-standards.md §3.C–D.

mod common;
use common::*;

use fastfallback_proto::{Query, QueryKind, RaceErrorKind};
use fastfallback_route::{Connectivity, HostModel, Nat64Prefix};
use fastfallback_sim::Scenario;

fn nat64_host() -> Scenario {
    Scenario::plain()
        .host(HostModel::v6_only())
        .connectivity(Connectivity {
            v6: true,
            v4: false,
            nat64: Some(Nat64Prefix::WELL_KNOWN),
        })
}

#[test]
fn ipv4_literal_connects_without_dns() {
    // T23
    let run = Scenario::for_address("tcp://192.0.2.1:443")
        .ok(V4A, 20)
        .run();
    assert!(run.queries().is_empty());
    assert_eq!(run.starts(), at(&[(V4A, 0)]));
    assert_eq!(run.won(), one(V4A, 20));
}

#[test]
fn refused_ipv4_literal_fails_after_exactly_one_attempt() {
    // T23, RST variant
    let run = Scenario::for_address("tcp://192.0.2.1:443")
        .refuse(V4A, 5)
        .run();
    let (err, t) = run.failed().expect("fails");
    assert_eq!((err.kind, t), (RaceErrorKind::AllAttemptsFailed, 5));
    assert_eq!(run.attempts.len(), 1);
}

#[test]
fn ipv6_literal_with_and_without_brackets_connects_without_dns() {
    // T24
    for addr in ["tcp://[2001:db8::a]:443", "[2001:db8::a]:443"] {
        let run = Scenario::for_address(addr).ok(V6A, 20).run();
        assert!(run.queries().is_empty(), "{addr}");
        assert_eq!(run.starts(), at(&[(V6A, 0)]), "{addr}");
        assert_eq!(run.won(), one(V6A, 20), "{addr}");
    }
}

#[test]
fn blackholed_literal_has_no_fallback_of_any_kind() {
    // T25
    let run = Scenario::for_address("tcp://[2001:db8::a]:443")
        .connect_timeout(1000)
        .run();
    assert_eq!(run.attempts.len(), 1);
    assert!(run.queries().is_empty());
    let (err, t) = run.failed().expect("fails");
    assert_eq!((err.kind, t), (RaceErrorKind::TimedOut, 1000));
}

#[test]
fn ipv6_only_host_with_pref64_synthesizes_from_a_answer() {
    // T26
    let run = nat64_host()
        .aaaa(10, &[])
        .a(20, &[V4A])
        .ok("64:ff9b::c000:201", 20)
        .run();
    assert_eq!(
        run.queries(),
        [
            (Query::origin(QueryKind::Aaaa), 0),
            (Query::origin(QueryKind::A), 0)
        ]
    );
    assert_eq!(run.starts(), at(&[("64:ff9b::c000:201", 20)]));
    assert_eq!(run.won(), one("64:ff9b::c000:201", 40));
    assert_eq!(run.attempts[0].plan.route.logical.to_string(), V4A);
}

#[test]
fn dns64_answers_are_desynthesized_and_never_attempted_twice() {
    // T27
    let run = nat64_host()
        .aaaa(10, &[V6A, "64:ff9b::c000:201"])
        .a(12, &[V4A])
        .drop(V6A)
        .ok("64:ff9b::c000:201", 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10), ("64:ff9b::c000:201", 260)]));
    assert_eq!(run.won(), one("64:ff9b::c000:201", 280));
    assert_eq!(run.attempts.len(), 2);
}

#[test]
fn ipv4_literal_on_nat64_network_is_synthesized() {
    // T28
    let run = Scenario::for_address("tcp://192.0.2.1:443")
        .host(HostModel::v6_only())
        .connectivity(Connectivity {
            v6: true,
            v4: false,
            nat64: Some(Nat64Prefix::WELL_KNOWN),
        })
        .ok("64:ff9b::c000:201", 10)
        .run();
    assert!(run.queries().is_empty());
    assert_eq!(run.starts(), at(&[("64:ff9b::c000:201", 0)]));
    assert_eq!(run.won(), one("64:ff9b::c000:201", 10));
}

#[test]
fn ipv4_literal_on_ipv6_only_network_without_pref64_fails_at_once_as_network_unreachable() {
    // T29 (b): NetworkUnreachable, naming the family, not "no usable addresses".
    let run = Scenario::for_address("tcp://192.0.2.1:443")
        .host(HostModel::v6_only())
        .run();
    let (err, t) = run.failed().expect("fails");
    assert_eq!(
        (err.kind, t),
        (
            RaceErrorKind::NetworkUnreachable(fastfallback_proto::Family::V4),
            0
        )
    );
    assert!(
        err.to_string()
            .starts_with("network unreachable: this host has no IPv4 route"),
        "{err}"
    );
    assert!(run.attempts.is_empty());
    assert_eq!(err.skipped[0].1, "the host has no IPv4 connectivity");
}

#[test]
fn broken_aaaa_on_nat64_network_falls_back_to_synthesized_ipv4() {
    // T30, editor's-copy expectation
    let run = nat64_host()
        .aaaa(10, &["2001:db8::dead"])
        .a(20, &[V4A])
        .ok("64:ff9b::c000:201", 20)
        .run();
    assert_eq!(
        run.queries(),
        [
            (Query::origin(QueryKind::Aaaa), 0),
            (Query::origin(QueryKind::A), 0)
        ]
    );
    assert_eq!(
        run.starts(),
        at(&[("2001:db8::dead", 10), ("64:ff9b::c000:201", 260)])
    );
    assert_eq!(run.won(), one("64:ff9b::c000:201", 280));
}

fn no_connectivity() -> Connectivity {
    Connectivity {
        v6: false,
        v4: false,
        nat64: None,
    }
}

#[test]
fn loopback_literal_connects_without_global_connectivity() {
    let run = Scenario::for_address("tcp://127.0.0.1:8080")
        .connectivity(no_connectivity())
        .ok("127.0.0.1", 1)
        .run();
    assert_eq!(run.starts(), at(&[("127.0.0.1", 0)]));
    assert_eq!(run.won(), one("127.0.0.1", 1));
    let run = Scenario::for_address("tcp://[::1]:8080")
        .host(HostModel::v4_only())
        .ok("::1", 1)
        .run();
    assert_eq!(run.won(), one("::1", 1));
}

#[test]
fn localhost_is_the_loopback_addresses_without_dns_even_without_connectivity() {
    // RFC 6761 §6.3; RFC 6724 puts ::1 (precedence 50) before 127.0.0.1.
    let run = Scenario::for_address("tcp://localhost:8080")
        .connectivity(no_connectivity())
        .refuse("::1", 1)
        .ok("127.0.0.1", 1)
        .run();
    assert!(run.queries().is_empty());
    assert_eq!(run.starts(), at(&[("::1", 0), ("127.0.0.1", 1)]));
    assert_eq!(run.won(), one("127.0.0.1", 2));
}

#[test]
fn ipv6_literal_on_an_ipv4_only_host_fails_as_network_unreachable_naming_ipv6() {
    let run = Scenario::for_address("tcp://[2001:db8::a]:443")
        .host(HostModel::v4_only())
        .run();
    let (err, t) = run.failed().expect("fails");
    assert_eq!(
        (err.kind, t),
        (
            RaceErrorKind::NetworkUnreachable(fastfallback_proto::Family::V6),
            0
        )
    );
    assert_eq!(
        std::io::Error::from(err.clone()).kind(),
        std::io::ErrorKind::NetworkUnreachable
    );
    assert!(run.attempts.is_empty());
}

#[test]
fn link_local_literal_with_a_zone_connects_with_that_scope_id() {
    let run = Scenario::for_address("tcp://[fe80::1%2]:8080")
        .ok("fe80::1", 1)
        .run();
    let std::net::SocketAddr::V6(target) = run.start_targets()[0].0 else {
        panic!("an IPv6 target");
    };
    assert_eq!(
        (*target.ip(), target.scope_id()),
        ("fe80::1".parse().unwrap(), 2)
    );
    assert_eq!(run.won(), one("fe80::1", 1));
}

#[test]
fn link_local_literal_whose_zone_name_was_not_resolved_is_skipped_with_a_reason() {
    let run = Scenario::for_address("tcp://[fe80::1%25eth0]:8080").run();
    let (err, _) = run.failed().expect("fails");
    assert_eq!(err.kind, RaceErrorKind::NoAddresses);
    assert!(
        err.skipped
            .iter()
            .any(|(_, why)| why.contains("\"eth0\" was not turned into an interface index")),
        "{err}"
    );
}

#[test]
fn link_local_answer_without_a_scope_is_still_skipped() {
    let run = Scenario::plain().aaaa(1, &["fe80::1"]).a(1, &[]).run();
    let (err, _) = run.failed().expect("fails");
    assert_eq!(err.skipped[0].1, "link-local address without a scope");
}

#[test]
fn a_loopback_literals_race_learns_nothing_and_a_documentation_literals_failure_is_a_lesson() {
    use fastfallback_plan::{FallbackPolicy, FastFallbackExchangeFinder, RaceInput};
    use fastfallback_proto::{
        AttemptError, AttemptErrorKind, AttemptEvent, Instant, Output, Phase,
    };
    use fastfallback_route::{Address, MemoryView, RouteMemory};
    // Runs one attempt to `origin` that fails with "refused" at 5 ms; returns the race.
    let race_to = |origin: &str, memory: MemoryView| {
        let input = RaceInput {
            memory,
            ..RaceInput::new(Connectivity::DUAL_STACK)
        };
        let address = Address::parse(origin).unwrap();
        let mut race = FastFallbackExchangeFinder::new(
            address,
            FallbackPolicy::default(),
            input,
            Instant::ZERO,
        );
        let id = loop {
            match race.poll_output(Instant::ZERO) {
                Some(Output::StartAttempt { id }) => break id,
                Some(_) => {}
                None => panic!("a literal's race starts its attempt at once"),
            }
        };
        let error = AttemptError::new(AttemptErrorKind::Refused, Phase::Tcp, "refused");
        let failed = AttemptEvent::Failed {
            error,
            follow_up: None,
        };
        race.handle_attempt(id, failed, Instant::from_millis(5));
        race
    };
    // RouteDatabase::view gives a loopback literal a disabled view: it teaches nothing.
    let quiet = race_to("tcp://127.0.0.1:80", MemoryView::disabled());
    assert!(!quiet.has_lessons());
    let mut taught = race_to(
        "tcp://203.0.113.5:80",
        MemoryView::empty(RouteMemory::default()),
    );
    assert!(taught.has_lessons(), "a refused route is a lesson");
    assert_eq!(taught.drain_lessons().count(), 1);
    assert!(!taught.has_lessons(), "drained");
}
