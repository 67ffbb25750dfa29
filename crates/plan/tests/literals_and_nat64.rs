//! IP literals (T23–T25) and NAT64 (T26–T30, HEv3 §8) of spec/happy-eyeballs-standards.md §3.C–D.

mod common;
use common::*;

use fastfallback_proto::{QueryKind, RaceErrorKind};
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
    assert_eq!(run.queries(), [(QueryKind::Aaaa, 0), (QueryKind::A, 0)]);
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
fn ipv4_literal_on_ipv6_only_network_without_pref64_fails_at_once() {
    // T29 (b)
    let run = Scenario::for_address("tcp://192.0.2.1:443")
        .host(HostModel::v6_only())
        .run();
    let (err, t) = run.failed().expect("fails");
    assert_eq!((err.kind, t), (RaceErrorKind::NoAddresses, 0));
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
    assert_eq!(run.queries(), [(QueryKind::Aaaa, 0), (QueryKind::A, 0)]);
    assert_eq!(
        run.starts(),
        at(&[("2001:db8::dead", 10), ("64:ff9b::c000:201", 260)])
    );
    assert_eq!(run.won(), one("64:ff9b::c000:201", 280));
}
