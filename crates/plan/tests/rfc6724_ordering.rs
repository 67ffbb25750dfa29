//! RFC 6724 §6 and HEv3 §5.3 as seen in attempt order: T22, T48, and OkHttp's route-ordering
//! scenarios (RS-17/RS-18, InetAddressOrderTest) in spec/okhttp-connection-layer.md §5.

mod common;
use common::*;

use fastfallback_plan::FamilyPreference;
use fastfallback_route::HostModel;
use fastfallback_sim::Scenario;

#[test]
fn unusable_destination_sorts_last_and_is_never_attempted() {
    // T22
    let host = HostModel::e0().with_unreachable("2001:db8:dead::".parse().unwrap(), 48);
    let run = Scenario::plain()
        .host(host)
        .aaaa(10, &["2001:db8:dead::1"])
        .a(5, &[V4A])
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 10)]));
    assert_eq!(run.won(), one(V4A, 30));
    let order: Vec<String> = run.final_order.iter().map(|s| s.ip().to_string()).collect();
    assert_eq!(order, [V4A, "2001:db8:dead::1"]);
}

#[test]
fn longest_matching_prefix_decides_ipv6_attempt_order() {
    // T48 (a)
    let run = Scenario::plain()
        .connect_timeout(5000)
        .aaaa(
            10,
            &[
                "2001:db8::1",
                "2001:db8::2",
                "2001:db8:ffff::5",
                "2001:db8:fff0::7",
            ],
        )
        .a(10, &[])
        .run();
    assert_eq!(
        run.starts(),
        at(&[
            ("2001:db8:ffff::5", 10),
            ("2001:db8:fff0::7", 260),
            ("2001:db8::1", 510),
            ("2001:db8::2", 760)
        ])
    );
}

#[test]
fn ula_is_tried_after_ipv4() {
    // T48 (b)
    let run = Scenario::plain()
        .connect_timeout(5000)
        .aaaa(10, &["fd00::1", "2001:db8::1"])
        .a(10, &[V4A])
        .run();
    assert_eq!(
        run.starts(),
        at(&[("2001:db8::1", 10), (V4A, 260), ("fd00::1", 510)])
    );
}

#[test]
fn teredo_is_tried_after_ipv4() {
    // T48 (c)
    let run = Scenario::plain()
        .connect_timeout(5000)
        .aaaa(10, &["2001:0:4136:e378::1"])
        .a(5, &[V4A])
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 10), ("2001:0:4136:e378::1", 260)]));
}

#[test]
fn dns_order_of_families_is_interleaved_ipv6_first() {
    // RS-18 / IO-1: [v4 .6, .1, .4] and [v6 ::ac, ::fc] -> ::ac, .6, ::fc, .1, .4
    let run = Scenario::plain()
        .connect_timeout(5000)
        .aaaa(0, &["2001:db8::ac", "2001:db8::fc"])
        .a(0, &["192.0.2.6", "192.0.2.1", "192.0.2.4"])
        .run();
    let order: Vec<String> = run.starts().into_iter().map(|(a, _)| a).collect();
    assert_eq!(
        order,
        [
            "2001:db8::ac",
            "192.0.2.6",
            "2001:db8::fc",
            "192.0.2.1",
            "192.0.2.4"
        ]
    );
}

#[test]
fn v4_first_preference_leads_with_ipv4() {
    let run = Scenario::plain()
        .tune(|p| p.family = FamilyPreference::V4First)
        .aaaa(0, &[V6A])
        .a(0, &[V4A])
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 0)]));
}

#[test]
fn v4_only_preference_sends_no_aaaa_query() {
    let run = Scenario::plain()
        .tune(|p| p.family = FamilyPreference::V4Only)
        .aaaa(0, &[V6A])
        .a(5, &[V4A])
        .ok(V4A, 20)
        .run();
    assert_eq!(
        run.queries(),
        [(
            fastfallback_proto::Query::origin(fastfallback_proto::QueryKind::A),
            0
        )]
    );
    assert_eq!(run.starts(), at(&[(V4A, 5)]));
}
