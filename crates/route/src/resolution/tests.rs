//! Tests of the resolution: the move-on rule, literals, admitted and skipped addresses, and
//! alias chains.

use fastfallback_proto::{Alpn, HttpsRecord};

use super::*;
use crate::Nat64Prefix;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn plain() -> Resolution {
    Resolution::new(
        &[QueryKind::Aaaa, QueryKind::A],
        Connectivity::DUAL_STACK,
        Family::V6,
        Duration::from_millis(50),
        AnswerLimits::default(),
    )
}

fn addrs(v: &[&str]) -> DnsAnswer {
    DnsAnswer::Addresses(v.iter().map(|s| ip(s)).collect())
}

#[test]
fn positive_aaaa_moves_on_at_once() {
    let mut r = plain();
    r.handle_answer(
        &Query::origin(QueryKind::Aaaa),
        &addrs(&["2001:db8::a"]),
        at(20),
    );
    assert!(r.poll(at(20)));
}

#[test]
fn positive_a_first_waits_for_the_resolution_delay() {
    let mut r = plain();
    r.handle_answer(&Query::origin(QueryKind::A), &addrs(&["192.0.2.1"]), at(20));
    assert!(!r.poll(at(20)));
    assert_eq!(r.deadline(), Some(at(70)));
    assert!(!r.poll(at(69)));
    assert!(r.poll(at(70)));
}

#[test]
fn with_ipv4_preferred_a_positive_a_answer_moves_on_at_once() {
    let mut r = Resolution::new(
        &[QueryKind::Aaaa, QueryKind::A],
        Connectivity::DUAL_STACK,
        Family::V4,
        Duration::from_millis(50),
        AnswerLimits::default(),
    );
    r.handle_answer(&Query::origin(QueryKind::A), &addrs(&["192.0.2.1"]), at(20));
    assert!(r.poll(at(20)));
}

#[test]
fn loopback_is_reachable_without_global_connectivity() {
    let none = Connectivity {
        v6: false,
        v4: false,
        nat64: None,
    };
    let r = Resolution::fixed(&[ip("::1"), ip("127.0.0.1")], false, none);
    assert_eq!(r.addresses(), [ip("::1"), ip("127.0.0.1")]);
    assert!(r.skipped().is_empty());
}

#[test]
fn a_literal_of_a_family_without_a_route_is_reported_as_unroutable() {
    let v4_only = Connectivity {
        v6: false,
        v4: true,
        nat64: None,
    };
    let r = Resolution::literal(ip("2001:db8::a"), v4_only);
    assert!(r.addresses().is_empty());
    assert_eq!(r.unroutable_family(), Some(Family::V6));
}

#[test]
fn a_literal_is_taken_as_is_exactly_when_fixed_admits_it_unchanged_and_silently() {
    let literals = [
        "2001:db8::a",
        "192.0.2.1",
        "::1",
        "127.0.0.1",
        "::ffff:192.0.2.1",
        "64:ff9b::c000:201",
        "fe80::1",
        "::",
        "0.0.0.0",
        "ff02::1",
        "224.0.0.1",
        "255.255.255.255",
        "fd00::1",
    ];
    let mut cases = 0;
    for v6 in [false, true] {
        for v4 in [false, true] {
            for nat64 in [None, Some(Nat64Prefix::WELL_KNOWN)] {
                let conn = Connectivity { v6, v4, nat64 };
                for l in literals {
                    let r = Resolution::literal(ip(l), conn);
                    let as_is = r.addresses() == [ip(l)]
                        && r.skipped().is_empty()
                        && r.unroutable_family().is_none();
                    assert_eq!(
                        Resolution::takes_literal_as_is(ip(l), conn),
                        as_is,
                        "{l} with {conn:?}"
                    );
                    cases += usize::from(as_is);
                }
            }
        }
    }
    // Some literals are taken as they are, and some are not.
    assert!(cases > 0 && cases < 4 * 2 * literals.len());
}

#[test]
fn a_scoped_link_local_literal_is_admitted_and_an_unscoped_one_is_not() {
    let c = Connectivity::DUAL_STACK;
    assert_eq!(
        Resolution::fixed(&[ip("fe80::1")], true, c).addresses(),
        [ip("fe80::1")]
    );
    let r = Resolution::fixed(&[ip("fe80::1")], false, c);
    assert!(r.addresses().is_empty());
    assert_eq!(r.skipped()[0].why, "link-local address without a scope");
}

#[test]
fn negative_aaaa_inside_the_delay_ends_it() {
    let mut r = plain();
    r.handle_answer(&Query::origin(QueryKind::A), &addrs(&["192.0.2.1"]), at(20));
    r.handle_answer(&Query::origin(QueryKind::Aaaa), &addrs(&[]), at(35));
    assert!(r.poll(at(35)));
}

#[test]
fn invalid_addresses_are_skipped_with_reasons() {
    let mut r = plain();
    r.handle_answer(
        &Query::origin(QueryKind::Aaaa),
        &addrs(&[
            "::",
            "ff02::1",
            "fe80::1",
            "2001:db8::a",
            "::ffff:192.0.2.9",
        ]),
        at(1),
    );
    r.handle_answer(
        &Query::origin(QueryKind::A),
        &addrs(&["255.255.255.255", "0.1.2.3", "224.0.0.1"]),
        at(1),
    );
    assert_eq!(r.addresses(), [ip("2001:db8::a"), ip("192.0.2.9")]);
    let whys: Vec<&str> = r.skipped().iter().map(|s| s.why.as_str()).collect();
    assert_eq!(
        whys,
        [
            "unspecified address",
            "multicast address",
            "link-local address without a scope",
            "broadcast address",
            "address in 0.0.0.0/8",
            "multicast address"
        ]
    );
}

#[test]
fn oversized_answers_are_capped_and_reported() {
    let mut r = Resolution::new(
        &[QueryKind::A],
        Connectivity::DUAL_STACK,
        Family::V6,
        Duration::from_millis(50),
        AnswerLimits { max_addresses: 4 },
    );
    let many: Vec<IpAddr> = (1..=10u8).map(|i| IpAddr::from([192, 0, 2, i])).collect();
    r.handle_answer(
        &Query::origin(QueryKind::A),
        &DnsAnswer::Addresses(many),
        at(1),
    );
    assert_eq!(r.addresses().len(), 4);
    assert_eq!(r.skipped().len(), 6);
    assert_eq!(r.skipped()[0].why, "answer capped at 4");
}

#[test]
fn dns64_answers_are_desynthesized_and_deduplicated() {
    let conn = Connectivity {
        v6: true,
        v4: false,
        nat64: Some(Nat64Prefix::WELL_KNOWN),
    };
    let mut r = Resolution::new(
        &conn.queries(false),
        conn,
        Family::V6,
        Duration::from_millis(50),
        AnswerLimits::default(),
    );
    r.handle_answer(
        &Query::origin(QueryKind::Aaaa),
        &addrs(&["2001:db8::a", "64:ff9b::c000:201"]),
        at(10),
    );
    r.handle_answer(&Query::origin(QueryKind::A), &addrs(&["192.0.2.1"]), at(12));
    assert_eq!(r.addresses(), [ip("2001:db8::a"), ip("192.0.2.1")]);
    assert_eq!(conn.connect_ip(ip("192.0.2.1")), ip("64:ff9b::c000:201"));
}

#[test]
fn ipv6_only_host_without_nat64_skips_ipv4() {
    let conn = Connectivity {
        v6: true,
        v4: false,
        nat64: None,
    };
    assert_eq!(conn.queries(false).as_slice(), [QueryKind::Aaaa]);
    let r = Resolution::literal(ip("192.0.2.1"), conn);
    assert!(r.addresses().is_empty());
    assert_eq!(r.skipped()[0].why, "the host has no IPv4 connectivity");
}

#[test]
fn alias_mode_is_followed_and_service_records_beside_it_are_ignored() {
    let mut r = Resolution::new(
        &[QueryKind::Https, QueryKind::Aaaa],
        Connectivity::DUAL_STACK,
        Family::V6,
        Duration::from_millis(50),
        AnswerLimits::default(),
    )
    .named("example.com");
    let alias = HttpsRecord {
        priority: 0,
        target: "Svc.Example.".into(),
        ..Default::default()
    };
    let svc = HttpsRecord {
        priority: 1,
        ipv6hint: vec!["2001:db8::9".parse().unwrap()],
        ..Default::default()
    };
    let https = Query::origin(QueryKind::Https);
    r.handle_answer(&https, &DnsAnswer::Https(vec![alias, svc]), at(5));
    assert!(r.addresses().is_empty());
    let asked: Vec<String> = r.take_queries().map(|q| q.to_string()).collect();
    assert_eq!(
        asked,
        ["HTTPS svc.example", "AAAA svc.example", "A svc.example"]
    );
    assert!(!r.poll(at(5)), "the alias target's HTTPS answer is awaited");
    // The target has no HTTPS records: its own addresses come first, the origin's last.
    let target = |kind| Query::target(kind, "svc.example");
    r.handle_answer(&target(QueryKind::Https), &DnsAnswer::Https(vec![]), at(8));
    r.handle_answer(&target(QueryKind::Aaaa), &addrs(&["2001:db8::5"]), at(9));
    r.handle_answer(&https, &DnsAnswer::Https(vec![]), at(9));
    r.handle_answer(
        &Query::origin(QueryKind::Aaaa),
        &addrs(&["2001:db8::1"]),
        at(10),
    );
    let mut groups = Vec::new();
    r.for_each_candidate(|c| groups.push((c.ip.to_string(), c.group)));
    assert_eq!(
        groups,
        [("2001:db8::5".to_owned(), 0), ("2001:db8::1".to_owned(), 1)]
    );
    assert!(r.poll(at(10)));
}

#[test]
fn an_answer_with_many_target_names_asks_about_a_bounded_number() {
    let mut r = Resolution::new(
        &[QueryKind::Https, QueryKind::Aaaa, QueryKind::A],
        Connectivity::DUAL_STACK,
        Family::V6,
        Duration::from_millis(50),
        AnswerLimits::default(),
    );
    let records: Vec<HttpsRecord> = (0..40)
        .map(|i| HttpsRecord {
            priority: 1,
            target: format!("svc{i}.example"),
            alpn: vec![Alpn::H2],
            ..Default::default()
        })
        .collect();
    let https = Query::origin(QueryKind::Https);
    r.handle_answer(&https, &DnsAnswer::Https(records), at(1));
    assert_eq!(r.take_queries().count(), 2 * MAX_TARGET_NAMES);
    assert_eq!(r.services().count(), MAX_TARGET_NAMES);
    let over = r
        .skipped()
        .iter()
        .filter(|s| s.why == format!("more than {MAX_TARGET_NAMES} names to ask about"))
        .count();
    // The first MAX_SKIPPED_LISTED are listed with the reason, the rest counted.
    assert_eq!(over, MAX_SKIPPED_LISTED.min(40 - MAX_TARGET_NAMES));
    assert_eq!(over + r.skipped_more(), 40 - MAX_TARGET_NAMES);
}

#[test]
fn alias_loops_and_overlong_chains_are_cut_with_a_reason() {
    let https = |name: &str| {
        if name == "example.com" {
            Query::origin(QueryKind::Https)
        } else {
            Query::target(QueryKind::Https, name)
        }
    };
    let alias = |to: &str| {
        DnsAnswer::Https(vec![HttpsRecord {
            priority: 0,
            target: to.into(),
            ..Default::default()
        }])
    };
    let fresh = || {
        Resolution::new(
            &[QueryKind::Https, QueryKind::Aaaa],
            Connectivity::DUAL_STACK,
            Family::V6,
            Duration::from_millis(50),
            AnswerLimits::default(),
        )
        .named("example.com")
    };
    // example.com -> a.example -> example.com
    let mut r = fresh();
    r.handle_answer(&https("example.com"), &alias("a.example"), at(1));
    r.handle_answer(&https("a.example"), &alias("example.com."), at(2));
    assert_eq!(
        r.skipped().last().unwrap().why,
        "alias loop (RFC 9460 §3.1)"
    );
    // A chain of aliases, each to a new name, stops after MAX_ALIAS_CHAIN links.
    let mut r = fresh();
    let mut name = "example.com".to_owned();
    for i in 0..=MAX_ALIAS_CHAIN {
        let next = format!("n{i}.example");
        r.handle_answer(&https(&name), &alias(&next), at(1));
        name = next;
    }
    assert_eq!(
        r.skipped().last().unwrap().why,
        format!("alias chain longer than {MAX_ALIAS_CHAIN} links")
    );
    let https_asked = r
        .take_queries()
        .filter(|q| q.kind == QueryKind::Https)
        .count();
    assert_eq!(https_asked, MAX_ALIAS_CHAIN);
    // An alias to "." means the service does not exist: the origin's records are used.
    let mut r = fresh();
    r.handle_answer(&https("example.com"), &alias("."), at(1));
    assert!(r.take_queries().next().is_none());
    assert!(r.skipped()[0].why.contains("unavailable"));
}
