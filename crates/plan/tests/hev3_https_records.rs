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
