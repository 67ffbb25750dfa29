//! RFC 8305 §3 and HEv3 §4: sending queries, handling answers, the Resolution Delay.
//! Conformance cases T01–T10 of spec/happy-eyeballs-standards.md §3.A.

mod common;
use common::*;

use fastfallback_proto::{DnsError, Query, QueryKind, RaceErrorKind};
use fastfallback_route::HostModel;
use fastfallback_sim::Scenario;

#[test]
fn aaaa_first_starts_ipv6_at_once_and_never_tries_ipv4() {
    // T01
    let run = Scenario::plain()
        .aaaa(20, &[V6A])
        .a(25, &[V4A])
        .ok(V6A, 20)
        .ok(V4A, 20)
        .run();
    assert_eq!(
        run.queries(),
        [
            (Query::origin(QueryKind::Aaaa), 0),
            (Query::origin(QueryKind::A), 0)
        ]
    );
    assert_eq!(run.starts(), at(&[(V6A, 20)]));
    assert_eq!(run.won(), one(V6A, 40));
    assert_eq!(run.attempts.len(), 1);
}

#[test]
fn a_first_waits_and_aaaa_inside_resolution_delay_goes_first() {
    // T02
    let run = Scenario::plain()
        .a(20, &[V4A])
        .aaaa(45, &[V6A])
        .ok(V6A, 20)
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 45)]));
    assert_eq!(run.won(), one(V6A, 65));
}

#[test]
fn a_first_starts_ipv4_when_resolution_delay_expires() {
    // T03
    let run = Scenario::plain()
        .a(20, &[V4A])
        .aaaa(150, &[V6A])
        .ok(V4A, 30)
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 70)]));
    assert_eq!(run.won(), one(V4A, 100));
    assert!(
        run.queries_cancelled().is_empty(),
        "AAAA at 150 is inside the 1 s DNS tail"
    );
}

#[test]
fn aaaa_nodata_before_a_means_no_resolution_delay() {
    // T04
    let run = Scenario::plain()
        .aaaa(10, &[])
        .a(30, &[V4A, V4B])
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 30)]));
    assert_eq!(run.won(), one(V4A, 50));
}

#[test]
fn aaaa_nodata_during_resolution_delay_ends_it_early() {
    // T05
    let run = Scenario::plain()
        .a(20, &[V4A])
        .aaaa(35, &[])
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 35)]));
    assert_eq!(run.won(), one(V4A, 55));
}

#[test]
fn aaaa_servfail_counts_as_negative_answer() {
    // T06 (a)
    let run = Scenario::plain()
        .a(20, &[V4A])
        .dns_error(30, QueryKind::Aaaa, DnsError::ServFail)
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 30)]));
    assert_eq!(run.won(), one(V4A, 50));
}

#[test]
fn silent_aaaa_is_dropped_one_second_after_success() {
    // T06 (b)
    let run = Scenario::plain().a(20, &[V4A]).ok(V4A, 20).run();
    assert_eq!(run.starts(), at(&[(V4A, 70)]));
    assert_eq!(run.won(), one(V4A, 90));
    assert_eq!(
        run.queries_cancelled(),
        [(Query::origin(QueryKind::Aaaa), 1090)]
    );
}

#[test]
fn positive_aaaa_is_enough_and_pending_a_defers_the_error_to_the_deadline() {
    // T07
    let run = Scenario::plain()
        .connect_timeout(3000)
        .aaaa(15, &[V6A])
        .drop(V6A)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 15)]));
    let (err, t) = run.failed().expect("race fails");
    assert_eq!((err.kind, t), (RaceErrorKind::TimedOut, 3000));
    assert_eq!(err.attempts.len(), 1);
    assert_eq!(err.attempts[0].addr.ip().to_string(), V6A);
    assert_eq!(run.open_sockets, 0);
}

#[test]
fn both_families_negative_fails_with_no_addresses_and_both_dns_outcomes() {
    // T08
    let run = Scenario::plain()
        .aaaa(10, &[])
        .dns_error(15, QueryKind::A, DnsError::NxDomain)
        .run();
    let (err, t) = run.failed().expect("race fails");
    assert_eq!((err.kind, t), (RaceErrorKind::NoAddresses, 15));
    assert_eq!(
        err.dns,
        [
            (Query::origin(QueryKind::Aaaa), None),
            (Query::origin(QueryKind::A), Some(DnsError::NxDomain))
        ]
    );
    assert!(run.attempts.is_empty());
    assert_eq!(run.open_sockets, 0);
}

#[test]
fn ipv4_only_host_queries_only_a_and_starts_without_delay() {
    // T09
    let run = Scenario::plain()
        .host(HostModel::v4_only())
        .aaaa(5, &[V6A])
        .a(20, &[V4A])
        .ok(V4A, 10)
        .run();
    assert_eq!(run.queries(), [(Query::origin(QueryKind::A), 0)]);
    assert_eq!(run.starts(), at(&[(V4A, 20)]));
    assert_eq!(run.won(), one(V4A, 30));
}

#[test]
fn ipv6_only_host_without_nat64_queries_only_aaaa() {
    // T10
    let run = Scenario::plain()
        .host(HostModel::v6_only())
        .aaaa(20, &[V6A])
        .ok(V6A, 10)
        .run();
    assert_eq!(run.queries(), [(Query::origin(QueryKind::Aaaa), 0)]);
    assert_eq!(run.starts(), at(&[(V6A, 20)]));
    assert_eq!(run.won(), one(V6A, 30));
}

#[test]
fn http_mode_sends_https_then_aaaa_then_a_at_time_zero() {
    // R-04 (HEv3 §4.1 order)
    let run = Scenario::https().aaaa(10, &[V6A]).ok(V6A, 10).run();
    assert_eq!(
        run.queries(),
        [
            (Query::origin(QueryKind::Https), 0),
            (Query::origin(QueryKind::Aaaa), 0),
            (Query::origin(QueryKind::A), 0)
        ]
    );
}

#[test]
fn answers_skipped_as_invalid_are_reported_in_the_error() {
    let run = Scenario::plain()
        .aaaa(10, &["ff02::1", "fe80::1"])
        .a(10, &["0.0.0.0"])
        .run();
    let (err, t) = run.failed().expect("race fails");
    assert_eq!((err.kind, t), (RaceErrorKind::NoAddresses, 10));
    let whys: Vec<&str> = err.skipped.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(
        whys,
        [
            "multicast address",
            "link-local address without a scope",
            "unspecified address"
        ]
    );
    assert!(
        err.to_string()
            .contains("skipped ff02::1: multicast address"),
        "{err}"
    );
}

#[test]
fn with_ipv4_first_a_positive_a_answer_moves_on_at_once() {
    // HEv3 §4.2's move-on rule waits for the *preferred* family's answer; with V4First that is
    // A, so a positive A starts at once instead of after the Resolution Delay.
    let run = Scenario::plain()
        .tune(|p| p.family = fastfallback_plan::FamilyPreference::V4First)
        .a(20, &[V4A])
        .aaaa(200, &[V6A])
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 20)]));
    assert_eq!(run.won(), one(V4A, 40));
}

#[test]
fn with_ipv4_first_a_positive_aaaa_alone_waits_for_the_resolution_delay() {
    let run = Scenario::plain()
        .tune(|p| p.family = fastfallback_plan::FamilyPreference::V4First)
        .aaaa(20, &[V6A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 70)]));
}
