//! HEv3 §4.2.1, §6.2 and RFC 9460: HTTPS records in HTTP mode (T35–T37, T39, T40).

mod common;
use common::*;

use fastfallback_plan::FallbackPolicy;
use fastfallback_proto::{Alpn, AlpnOffer, HttpsRecord};
use fastfallback_sim::Scenario;

fn rr(alpn: &[Alpn]) -> HttpsRecord {
    HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: alpn.to_vec(),
        ..Default::default()
    }
}

#[test]
fn https_answer_inside_resolution_delay_is_waited_for() {
    // T35
    let run = Scenario::https()
        .aaaa(20, &[V6A])
        .a(20, &[V4A])
        .https_rr(45, vec![rr(&[Alpn::H2])])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 45)]));
    assert_eq!(run.won(), one(V6A, 65));
    let tls = run.attempts[0]
        .plan
        .tls
        .clone()
        .expect("https plans do TLS");
    assert_eq!(tls.alpn, [Alpn::H2, Alpn::Http11]);
    assert_eq!(tls.server_name, "example.com");
}

#[test]
fn silent_https_query_waits_only_for_the_resolution_delay() {
    // T35 variant
    let run = Scenario::https()
        .aaaa(20, &[V6A])
        .a(20, &[V4A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 70)]));
    assert_eq!(run.won(), one(V6A, 90));
}

#[test]
fn hints_allow_an_early_start() {
    // T36
    let mut r = rr(&[Alpn::H2]);
    r.ipv6hint = vec![V6A.parse().unwrap()];
    r.ipv4hint = vec![V4A.parse().unwrap()];
    let run = Scenario::https()
        .https_rr(15, vec![r])
        .aaaa(300, &[V6A])
        .a(300, &[V4A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 15)]));
    assert_eq!(run.won(), one(V6A, 35));
}

#[test]
fn hints_give_way_to_the_real_records() {
    // T37
    let mut r = rr(&[Alpn::H2]);
    r.ipv6hint = vec!["2001:db8::99".parse().unwrap()];
    r.ipv4hint = vec!["192.0.2.99".parse().unwrap()];
    let run = Scenario::https()
        .https_rr(10, vec![r])
        .aaaa(200, &[V6A])
        .a(200, &[V4A])
        .ok("192.0.2.99", 5)
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[("2001:db8::99", 10), (V4A, 260)]));
    assert_eq!(run.won(), one(V4A, 280));
    assert_eq!(run.cancelled(), at(&[("2001:db8::99", 280)]));
}

#[test]
fn record_with_only_unsupported_alpn_counts_as_empty() {
    // T39
    let r = HttpsRecord {
        priority: 1,
        target: "svc1.example".into(),
        alpn: vec![Alpn::H3],
        no_default_alpn: true,
        ipv6hint: vec!["2001:db8::2".parse().unwrap()],
        ..Default::default()
    };
    let run = Scenario::https()
        .https_rr(10, vec![r])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10)]));
    assert_eq!(run.won(), one(V6A, 30));
    assert!(
        run.attempts
            .iter()
            .all(|a| a.plan.route.target.ip().to_string() != "2001:db8::2")
    );
}

#[test]
fn h3_record_without_no_default_alpn_still_allows_tcp() {
    // T39 variant: the set is {h3, http/1.1}
    let run = Scenario::https()
        .https_rr(10, vec![rr(&[Alpn::H3])])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10)]));
    assert_eq!(
        run.attempts[0].plan.tls.as_ref().unwrap().alpn,
        [Alpn::H2, Alpn::Http11]
    );
}

#[test]
fn port_svcparam_redirects_attempts_and_keeps_origin_sni() {
    // T40
    let mut r = rr(&[Alpn::H2]);
    r.port = Some(8443);
    let run = Scenario::https()
        .https_rr(10, vec![r])
        .aaaa(10, &[V6A])
        .ok(V6A, 20)
        .run();
    let targets: Vec<String> = run
        .start_targets()
        .iter()
        .map(|(s, _)| s.to_string())
        .collect();
    assert_eq!(targets, ["[2001:db8::a]:8443"]);
    assert_eq!(
        run.attempts[0].plan.tls.as_ref().unwrap().server_name,
        "example.com"
    );
    assert_eq!(run.won(), one(V6A, 30));
}

#[test]
fn an_http1_only_client_skips_an_h2_only_record_and_offers_only_http11() {
    // RFC 9460 §7.1.2 with the client's own offer: {h2} with no-default-alpn is nothing an
    // HTTP/1-only client speaks, so its hint is never tried.
    let r = HttpsRecord {
        priority: 1,
        target: "svc1.example".into(),
        alpn: vec![Alpn::H2],
        no_default_alpn: true,
        ipv6hint: vec!["2001:db8::2".parse().unwrap()],
        ..Default::default()
    };
    let policy = FallbackPolicy::builder()
        .alpn(AlpnOffer::Http11Only)
        .build()
        .unwrap();
    let run = Scenario::https()
        .policy(policy)
        .https_rr(10, vec![r])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10)]));
    let tls = run.attempts[0]
        .plan
        .tls
        .clone()
        .expect("https plans do TLS");
    assert_eq!(tls.alpn, [Alpn::Http11]);
    assert!(
        run.attempts
            .iter()
            .all(|a| a.plan.route.target.ip().to_string() != "2001:db8::2")
    );
}

#[test]
fn a_record_with_port_0_is_incompatible_and_skipped_with_a_reason() {
    // RFC 9460 §7.2: port=0 names no port; the record is skipped, not connected to on :0.
    let mut r = rr(&[Alpn::H2]);
    r.port = Some(0);
    r.ipv6hint = vec![V6B.parse().unwrap()];
    let run = Scenario::https()
        .https_rr(10, vec![r])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10)]));
    assert!(
        run.attempts
            .iter()
            .all(|a| a.plan.route.target.port() == 443)
    );
    assert_eq!(run.won(), one(V6A, 30));

    // The reason reaches the race's error when nothing else works.
    let mut r = rr(&[Alpn::H2]);
    r.port = Some(0);
    let run = Scenario::https()
        .https_rr(10, vec![r])
        .aaaa(10, &[])
        .a(10, &[])
        .run();
    let (error, _) = run.failed().expect("no addresses");
    assert!(
        error
            .skipped
            .iter()
            .any(|(what, why)| what == "HTTPS record 1" && why == "port=0"),
        "{:?}",
        error.skipped
    );
}

#[test]
fn a_malformed_record_is_skipped_with_its_reason() {
    // RFC 9460 §8: a mandatory key missing from the record (found by the driver's parser).
    let mut bad = rr(&[Alpn::H2]);
    bad.malformed = Some("mandatory key port is missing".into());
    bad.ipv6hint = vec![V6B.parse().unwrap()];
    let run = Scenario::https()
        .https_rr(10, vec![bad])
        .aaaa(300, &[])
        .a(300, &[])
        .connect_timeout(1000)
        .run();
    assert!(
        run.starts().is_empty(),
        "the hint of a malformed record is not used"
    );
    let (error, _) = run.failed().expect("no addresses");
    assert!(
        error
            .skipped
            .iter()
            .any(|(_, why)| why == "mandatory key port is missing"),
        "{:?}",
        error.skipped
    );
}

#[test]
fn empty_answers_for_both_families_keep_the_hints_when_nothing_else_is_left() {
    // HEv3 §7 / P10: real answers replace hints, but NODATA for both families must not
    // leave the race with no address while a usable hint remains.
    // The second hint is still untried when both NODATA answers arrive; it must stay.
    let mut r = rr(&[Alpn::H2]);
    r.ipv6hint = vec![V6B.parse().unwrap(), V6C.parse().unwrap()];
    let run = Scenario::https()
        .https_rr(10, vec![r])
        .aaaa(20, &[])
        .a(20, &[])
        .drop(V6B)
        .ok(V6C, 30)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6B, 10), (V6C, 260)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won(), one(V6C, 290));
    assert!(run.failed().is_none());

    // A real answer for one family still replaces the hints of both (T37's rule): the hint
    // already tried keeps running, and the real address goes next.
    let mut r = rr(&[Alpn::H2]);
    r.ipv6hint = vec![V6B.parse().unwrap()];
    let run = Scenario::https()
        .https_rr(10, vec![r])
        .aaaa(20, &[])
        .a(20, &[V4A])
        .behave(V6B, fastfallback_sim::Behaviour::Drop)
        .ok(V4A, 10)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6B, 10), (V4A, 260)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won().map(|(a, _)| a), Some(V4A.to_owned()));
}

#[test]
fn records_of_equal_priority_are_shuffled_by_the_race_seed() {
    // T38b, RFC 9460 §2.4.1: two services at priority 1, each with one working address.
    let service = |hint: &str, port: u16| {
        let mut r = rr(&[Alpn::H2]);
        r.ipv6hint = vec![hint.parse().unwrap()];
        r.port = Some(port);
        r
    };
    let mut first_b = 0;
    for seed in 0..200 {
        let run = Scenario::https()
            .seed(seed)
            .https_rr(10, vec![service(V6A, 8443), service(V6B, 9443)])
            .aaaa(300, &[V6A, V6B])
            .a(300, &[])
            .ok(V6A, 20)
            .ok(V6B, 20)
            .run();
        let first = &run.attempts[0].plan.route.target;
        // The leading record decides the port too.
        match (first.ip().to_string().as_str(), first.port()) {
            (V6A, _) => {}
            (V6B, _) => first_b += 1,
            other => panic!("unexpected first attempt {other:?}"),
        }
        // Same seed, same order.
        let again = Scenario::https()
            .seed(seed)
            .https_rr(10, vec![service(V6A, 8443), service(V6B, 9443)])
            .aaaa(300, &[V6A, V6B])
            .a(300, &[])
            .ok(V6A, 20)
            .ok(V6B, 20)
            .run();
        assert_eq!(again.attempts[0].plan.route.target, *first);
    }
    assert!(
        (65..=135).contains(&first_b),
        "service B first in {first_b} of 200 runs"
    );
}
