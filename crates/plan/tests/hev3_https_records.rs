//! HEv3 §4.2.1, §6.2 and RFC 9460: HTTPS records in HTTP mode (T35–T40, T38b; aliases).

mod common;
use common::*;

use fastfallback_plan::FallbackPolicy;
use fastfallback_proto::{Alpn, AlpnOffer, DnsError, HttpsRecord, QueryKind};
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
    // T35 variant, for a client without ECH (T35 does not make the client ECH-capable).
    let run = Scenario::https()
        .tune(|p| p.ech = false)
        .aaaa(20, &[V6A])
        .a(20, &[V4A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 70)]));
    assert_eq!(run.won(), one(V6A, 90));
}

#[test]
fn an_ech_capable_client_holds_tls_for_a_silent_https_query_up_to_the_https_wait() {
    // E-02 / R-34: no ClientHello before SVCB resolution has finished. TCP starts at the
    // Resolution Delay (70) as usual and connects at 90; TLS is held until the HTTPS wait
    // (150 ms after the first positive answer at 20) ends at 170, then goes without ECH.
    let run = Scenario::https()
        .aaaa(20, &[V6A])
        .a(20, &[V4A])
        .ok_tls(V6A, 20, 10)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 70)]), "{}", run.timeline());
    assert_eq!(run.resumed(), at(&[(V6A, 170)]), "{}", run.timeline());
    assert_eq!(run.won(), one(V6A, 180));
    let plan = &run.attempts[0].plan;
    assert!(plan.tls.as_ref().unwrap().ech.is_none());
    assert!(!plan.hold_tls, "the record keeps the plan as resumed");
}

#[test]
fn the_client_hello_waits_for_a_late_https_answer_and_then_uses_its_ech() {
    // T41 (R-34, R-39, R-40, E-02, E-03, P6): the HTTPS answer at 150 carries `ech`. TCP to
    // v6a starts at the Resolution Delay (60) and connects at 80; the ClientHello waits for
    // the answer and goes out at 150 with ECH; TLS takes 30 ms. The TCP handshake moved the
    // next-attempt deadline to 80 + 250 = 330, so v4a is never attempted.
    let mut r = rr(&[Alpn::H2]);
    r.ech = Some(std::sync::Arc::from(&b"an ECHConfigList"[..]));
    let run = Scenario::https()
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .https_rr(150, vec![r])
        .ok_tls(V6A, 20, 30)
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 60)]), "{}", run.timeline());
    assert_eq!(run.tcp_connected(), at(&[(V6A, 80)]), "{}", run.timeline());
    assert_eq!(run.resumed(), at(&[(V6A, 150)]), "{}", run.timeline());
    assert_eq!(run.won(), one(V6A, 180));
    assert!(run.attempts[0].plan.tls.as_ref().unwrap().ech.is_some());
}

/// A record that moves the origin to `svc.example` (hint V6B) and carries `ech`, so the race
/// turns SVCB-reliant and the origin's own addresses are no longer listed.
fn ech_service_at_v6b() -> HttpsRecord {
    let mut r = rr(&[Alpn::H2]);
    r.target = "svc.example".into();
    r.ipv6hint = vec![V6B.parse().unwrap()];
    r.ech = Some(std::sync::Arc::from(&b"an ECHConfigList"[..]));
    r
}

#[test]
fn a_held_attempt_whose_endpoint_the_https_answer_withdraws_is_cancelled() {
    // RFC 9460 §5.1: a pre-connection is used only if it is consistent with a record. The
    // HTTPS answer makes the race SVCB-reliant on svc.example (every record has `ech`), so
    // the origin's address, held after TCP, is withdrawn; the service's address goes next.
    let r = ech_service_at_v6b();
    let run = Scenario::https()
        .aaaa(10, &[V6A])
        .a(10, &[])
        .https_rr(150, vec![r])
        .ok_tls(V6A, 20, 30)
        .ok_tls(V6B, 20, 30)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 60), (V6B, 150)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.cancelled(), at(&[(V6A, 150)]), "{}", run.timeline());
    let reason = run.attempts[0].error().map(|e| e.to_string());
    assert!(
        reason
            .as_deref()
            .is_some_and(|r| r.contains("the DNS answers no longer list it")),
        "{reason:?}"
    );
    assert_eq!(run.won(), one(V6B, 200));
    // The service's attempt started after the answer, so it did not hold.
    assert!(!run.attempts[1].plan.hold_tls);
}

#[test]
fn a_held_attempt_withdrawn_as_its_tcp_connects_does_not_take_tls_from_the_others() {
    // OkHttp's mode (`WinAt::Tcp`): the first TCP connect owns TLS and the others stop. The
    // HTTPS answer (at 70) withdraws the origin's address while its TCP handshake is under
    // way; when that handshake ends (at 80) the attempt is withdrawn, not the winner, so the
    // race must go on to the service's address (its hint) at once and win there, instead of
    // waiting, owned by an ended attempt, until its deadline.
    let r = ech_service_at_v6b();
    let run = Scenario::https()
        .tune(|p| p.win_at = fastfallback_plan::WinAt::Tcp)
        .aaaa(10, &[V6A])
        .a(10, &[])
        .https_rr(70, vec![r])
        .ok_tls(V6A, 20, 30)
        .ok_tls(V6B, 20, 30)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 60), (V6B, 80)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.cancelled(), at(&[(V6A, 80)]), "{}", run.timeline());
    assert_eq!(run.won(), one(V6B, 130), "{}", run.timeline());
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

const SVC_A6: &str = "2001:db8:a::1";
const SVC_A4: &str = "198.51.100.1";
const SVC_B6: &str = "2001:db8:b::1";

fn t38_records() -> Vec<HttpsRecord> {
    vec![
        HttpsRecord {
            priority: 1,
            target: "svcA.example.".into(),
            alpn: vec![Alpn::H2],
            ipv6hint: vec![SVC_A6.parse().unwrap()],
            ipv4hint: vec![SVC_A4.parse().unwrap()],
            ..Default::default()
        },
        HttpsRecord {
            priority: 2,
            target: "svcB.example.".into(),
            alpn: vec![Alpn::H2],
            ipv6hint: vec![SVC_B6.parse().unwrap()],
            ..Default::default()
        },
    ]
}

#[test]
fn service_priority_groups_go_in_order_and_origin_addresses_without_a_record_go_last() {
    // T38 (R-19, R-25, S-07)
    let run = Scenario::https()
        .https_rr(10, t38_records())
        .aaaa_for("svca.example", 20, &[SVC_A6])
        .a_for("svca.example", 20, &[SVC_A4])
        .aaaa_for("svcb.example", 20, &[SVC_B6])
        .a_for("svcb.example", 20, &[])
        .aaaa(20, &[V6A])
        .a(20, &[V4A])
        .drop(SVC_A6)
        .drop(SVC_A4)
        .ok(SVC_B6, 10)
        .ok(V6A, 10)
        .ok(V4A, 10)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(SVC_A6, 10), (SVC_A4, 260), (SVC_B6, 510)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.won(), one(SVC_B6, 520));
    // the TargetNames' addresses are asked for as soon as the records arrive.
    let follow_ups: Vec<(String, u64)> = run
        .queries()
        .into_iter()
        .filter(|(q, _)| !q.is_origin())
        .map(|(q, t)| (q.to_string(), t))
        .collect();
    let expected: Vec<(String, u64)> = [
        "AAAA svca.example",
        "A svca.example",
        "AAAA svcb.example",
        "A svcb.example",
    ]
    .iter()
    .map(|q| (q.to_string(), 10))
    .collect();
    assert_eq!(follow_ups, expected);
    // SNI names the origin, not the TargetName.
    assert_eq!(
        run.attempts[2].plan.tls.as_ref().unwrap().server_name,
        "example.com"
    );
}

#[test]
fn a_record_for_the_owner_name_puts_the_origin_addresses_in_its_group() {
    // The same records plus `3 .`: the origin's addresses now belong to priority 3, still after
    // both services, and its port applies to them.
    let mut records = t38_records();
    records.push(HttpsRecord {
        priority: 3,
        target: ".".into(),
        alpn: vec![Alpn::H2],
        port: Some(8443),
        ..Default::default()
    });
    let run = Scenario::https()
        .https_rr(10, records)
        .aaaa_for("svca.example", 20, &[])
        .a_for("svca.example", 20, &[])
        .aaaa_for("svcb.example", 20, &[])
        .a_for("svcb.example", 20, &[])
        .aaaa(20, &[V6A])
        .a(20, &[V4A])
        .ok(V6A, 10)
        .run();
    // The services' hints were replaced by empty real answers at 20: only the origin's are
    // left, and they start when the attempt delay after a::1 (still in flight) runs out.
    assert_eq!(
        run.starts(),
        at(&[(SVC_A6, 10), (V6A, 260)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.attempts[1].plan.route.target.port(), 8443);
    assert_eq!(run.won(), one(V6A, 270));
}

fn alias_to(target: &str) -> HttpsRecord {
    HttpsRecord {
        priority: 0,
        target: target.into(),
        ..Default::default()
    }
}

#[test]
fn an_alias_is_followed_to_its_service_records() {
    // RFC 9460 §2.4.2 and §3 step 3: the origin aliases to cdn.example, whose ServiceMode
    // record (TargetName ".", i.e. cdn.example) names port 8443. The origin's own address goes
    // last.
    let mut svc = rr(&[Alpn::H2]);
    svc.port = Some(8443);
    svc.ipv6hint = vec![V6B.parse().unwrap()];
    let run = Scenario::https()
        .aaaa(5, &[V6A])
        .a(5, &[])
        .https_rr(10, vec![alias_to("cdn.example.")])
        .https_rr_for("cdn.example", 20, vec![svc])
        .aaaa_for("cdn.example", 30, &[V6B])
        .a_for("cdn.example", 30, &[])
        .ok(V6B, 20)
        .ok(V6A, 20)
        .run();
    let follow_ups: Vec<String> = run
        .queries()
        .into_iter()
        .filter(|(q, t)| !q.is_origin() && *t == 10)
        .map(|(q, _)| q.to_string())
        .collect();
    assert_eq!(
        follow_ups,
        ["HTTPS cdn.example", "AAAA cdn.example", "A cdn.example"]
    );
    // The move-on rule waits for the end of the alias chain (still inside the Resolution
    // Delay that the origin's AAAA at 5 started).
    assert_eq!(run.starts(), at(&[(V6B, 20)]), "{}", run.timeline());
    assert_eq!(run.attempts[0].plan.route.target.port(), 8443);
    assert_eq!(run.won(), one(V6B, 40));
}

#[test]
fn an_alias_target_without_service_records_is_reached_through_its_own_addresses() {
    // RFC 9460 §2.4.2: the TargetName "resolves to SVCB, AAAA, and/or A records".
    let run = Scenario::https()
        .aaaa(5, &[V6A])
        .a(5, &[])
        .https_rr(10, vec![alias_to("cdn.example")])
        .https_rr_for("cdn.example", 20, vec![])
        .aaaa_for("cdn.example", 20, &[V6B])
        .a_for("cdn.example", 20, &[])
        .drop(V6B)
        .ok(V6A, 20)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6B, 20), (V6A, 270)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.attempts[0].plan.route.target.port(), 443);
    assert_eq!(run.won(), one(V6A, 290));
}

#[test]
fn an_alias_loop_falls_back_to_the_origin_with_a_reason() {
    // RFC 9460 §3.1: example.com -> a.example -> example.com is a loop; SVCB resolution has
    // failed, so the origin's own records are used.
    let run = Scenario::https()
        .aaaa(5, &[V6A])
        .a(5, &[])
        .https_rr(10, vec![alias_to("a.example")])
        .https_rr_for("a.example", 20, vec![alias_to("example.com.")])
        .aaaa_for("a.example", 20, &[V6B])
        .a_for("a.example", 20, &[])
        .drop(V6A)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 20)]), "{}", run.timeline());
    let (error, _) = run.failed().expect("the only address drops");
    assert!(
        error
            .skipped
            .iter()
            .any(|(what, why)| what.contains("example.com.") && why.contains("alias loop")),
        "{:?}",
        error.skipped
    );
}

#[test]
fn follow_up_queries_are_not_sent_after_a_win() {
    // HEv3 §6: the DNS tail starts nothing. The HTTPS answer arrives after the race is won.
    let run = Scenario::https()
        .tune(|p| p.ech = false)
        .aaaa(5, &[V6A])
        .a(5, &[V4A])
        .https_rr(200, t38_records())
        .ok(V6A, 10)
        .run();
    assert_eq!(run.won(), one(V6A, 65));
    assert!(
        run.queries().iter().all(|(q, _)| q.is_origin()),
        "{}",
        run.timeline()
    );
}

#[test]
fn a_target_name_without_hints_is_awaited_within_the_resolution_delay() {
    // Our reading where the profile is silent: the first service's TargetName has no hint, so
    // its AAAA answer is awaited instead of starting the origin's fallback address at once.
    let svc = HttpsRecord {
        priority: 1,
        target: "svc.example".into(),
        alpn: vec![Alpn::H2],
        ..Default::default()
    };
    let run = Scenario::https()
        .aaaa(5, &[V6A])
        .a(5, &[])
        .https_rr(10, vec![svc.clone()])
        .aaaa_for("svc.example", 30, &[V6B])
        .a_for("svc.example", 30, &[])
        .ok(V6B, 20)
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6B, 30)]), "{}", run.timeline());
    // If the TargetName never answers, the Resolution Delay (50 ms after the first positive
    // answer at 5) still bounds the wait.
    let run = Scenario::https()
        .aaaa(5, &[V6A])
        .a(5, &[])
        .https_rr(10, vec![svc])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 55)]), "{}", run.timeline());
}

#[test]
fn every_endpoint_carrying_ech_makes_the_race_svcb_reliant() {
    // T42 (E-01): the only record carries `ech`, so every attempt uses it and none goes
    // without. Both handshakes fail 30 ms after they start (the servers reject ECH).
    let mut r = rr(&[Alpn::H2]);
    r.ech = Some(std::sync::Arc::from(&b"an ECHConfigList"[..]));
    let reject = fastfallback_sim::Behaviour::TlsFail {
        tcp: 10,
        tls: 20,
        follow_up: None,
    };
    let run = Scenario::https()
        .https_rr(10, vec![r.clone()])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .behave(V6A, reject.clone())
        .behave(V4A, reject)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 40)]),
        "{}",
        run.timeline()
    );
    assert!(run.failed().is_some());
    assert!(run.attempts.iter().all(|a| {
        a.plan.tls.as_ref().and_then(|t| t.ech.as_deref()) == Some(&b"an ECHConfigList"[..])
    }));

    // A second service without `ech` and a TargetName of its own: the client is not
    // SVCB-reliant, and the origin's own addresses stay as the last fallback.
    let mut other = rr(&[Alpn::H2]);
    other.priority = 2;
    other.target = "plain.example".into();
    other.ipv6hint = vec![V6B.parse().unwrap()];
    let mut ech_only = r;
    ech_only.target = "ech.example".into();
    ech_only.ipv6hint = vec![V6C.parse().unwrap()];
    let run = Scenario::https()
        .https_rr(10, vec![ech_only.clone(), other])
        .aaaa(10, &[V6A])
        .a(10, &[])
        .drop(V6C)
        .drop(V6B)
        .ok(V6A, 10)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6C, 10), (V6B, 260), (V6A, 510)]),
        "{}",
        run.timeline()
    );
    assert!(run.attempts[0].plan.tls.as_ref().unwrap().ech.is_some());
    assert!(run.attempts[1].plan.tls.as_ref().unwrap().ech.is_none());

    // Only the ECH service: the origin's working address is never tried without ECH.
    let run = Scenario::https()
        .https_rr(10, vec![ech_only])
        .aaaa(10, &[V6A])
        .a(10, &[])
        .drop(V6C)
        .ok(V6A, 10)
        .connect_timeout(2000)
        .run();
    assert_eq!(run.starts(), at(&[(V6C, 10)]), "{}", run.timeline());
}

#[test]
fn each_service_s_attempts_carry_that_service_s_own_ech_configuration() {
    // RFC 9848, "ClientHello construction" (E-03): an endpoint's ClientHello is built from
    // the ECH configuration of its own record. Two services with configurations of their
    // own, each with its own TargetName; both blackhole, so each is attempted.
    let mut first = rr(&[Alpn::H2]);
    first.target = "one.example".into();
    first.ipv6hint = vec![V6B.parse().unwrap()];
    first.ech = Some(std::sync::Arc::from(&b"the first ECHConfigList"[..]));
    let mut second = rr(&[Alpn::H2]);
    second.priority = 2;
    second.target = "two.example".into();
    second.ipv6hint = vec![V6C.parse().unwrap()];
    second.ech = Some(std::sync::Arc::from(&b"the second ECHConfigList"[..]));
    let run = Scenario::https()
        .https_rr(10, vec![first, second])
        .aaaa(10, &[V6A])
        .a(10, &[])
        .drop(V6B)
        .drop(V6C)
        .ok(V6A, 10)
        .run();
    let ech = |ip: &str| {
        run.attempts
            .iter()
            .find(|a| a.plan.route.target.ip().to_string() == ip)
            .and_then(|a| a.plan.tls.as_ref()?.ech.as_deref().map(<[u8]>::to_vec))
    };
    assert_eq!(
        ech(V6B),
        Some(b"the first ECHConfigList".to_vec()),
        "{}",
        run.timeline()
    );
    assert_eq!(
        ech(V6C),
        Some(b"the second ECHConfigList".to_vec()),
        "{}",
        run.timeline()
    );
}

#[test]
fn an_https_failure_over_protected_dns_abandons_the_connection_before_any_client_hello() {
    // T41b: the same race as T41, over a resolver the caller marks as protected, but
    // the HTTPS answer at 150 is SERVFAIL. The race fails then; the held attempt (TCP up since
    // 80) is closed without a ClientHello, and nothing else starts.
    let run = Scenario::https()
        .tune(|p| p.protected_dns = true)
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .dns_error(150, QueryKind::Https, DnsError::ServFail)
        .ok_tls(V6A, 20, 30)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 60)]), "{}", run.timeline());
    assert!(run.resumed().is_empty(), "{}", run.timeline());
    assert_eq!(run.cancelled(), at(&[(V6A, 150)]));
    let (error, t) = run.failed().expect("the race fails");
    assert_eq!(t, 150);
    assert_eq!(
        error.kind,
        fastfallback_proto::RaceErrorKind::SvcbResolutionFailed
    );
}

#[test]
fn over_protected_dns_the_client_hello_waits_for_the_https_answer_past_the_https_wait() {
    // with protected DNS an ECH-capable client holds TLS until the HTTPS answer, however
    // late (here 400 ms, past the 150 ms HTTPS wait).
    let mut r = rr(&[Alpn::H2]);
    r.ech = Some(std::sync::Arc::from(&b"an ECHConfigList"[..]));
    let run = Scenario::https()
        .tune(|p| p.protected_dns = true)
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .https_rr(400, vec![r])
        .ok_tls(V6A, 20, 30)
        .run();
    assert_eq!(run.resumed(), at(&[(V6A, 400)]), "{}", run.timeline());
    assert_eq!(run.won(), one(V6A, 430));
    assert!(run.attempts[0].plan.tls.as_ref().unwrap().ech.is_some());
}

#[test]
fn a_target_name_s_nodata_aaaa_counts_as_the_preferred_family_s_answer() {
    // R-08 set 1 (HEv3 §4.2): "an answer (positive or negative) ... to the query for the
    // TargetName of a compatible ServiceMode record". The service's TargetName has no AAAA
    // (NODATA at 20) and an A at 20; the origin's own queries answer late. The race starts
    // the service's IPv4 address at 20, not at the Resolution Delay (70).
    let svc = HttpsRecord {
        priority: 1,
        target: "svc.example".into(),
        alpn: vec![Alpn::H2],
        ..Default::default()
    };
    let run = Scenario::https()
        .https_rr(10, vec![svc.clone()])
        .aaaa_for("svc.example", 20, &[])
        .a_for("svc.example", 20, &[SVC_A4])
        .aaaa(200, &[V6A])
        .a(200, &[V4A])
        .ok(SVC_A4, 10)
        .run();
    assert_eq!(run.starts(), at(&[(SVC_A4, 20)]), "{}", run.timeline());
    assert_eq!(run.won(), one(SVC_A4, 30));
    // The NODATA arriving inside the Resolution Delay that the A at 20 started ends it on
    // arrival, at 35.
    let run = Scenario::https()
        .https_rr(10, vec![svc])
        .aaaa_for("svc.example", 35, &[])
        .a_for("svc.example", 20, &[SVC_A4])
        .aaaa(200, &[V6A])
        .a(200, &[V4A])
        .ok(SVC_A4, 10)
        .run();
    assert_eq!(run.starts(), at(&[(SVC_A4, 35)]), "{}", run.timeline());
    assert_eq!(run.won(), one(SVC_A4, 45));
}

#[test]
fn when_every_svcb_endpoint_fails_the_origin_is_tried_on_its_own_port() {
    // RFC 9460 §3 (S-07): "if ... connecting using this list of endpoints fails, the client
    // now attempts to use non-SVCB connection modes". The only record is `1 . port=8443`: the
    // owner's addresses on 8443. Both refuse (the first behaviour of each address); the race
    // then connects to the origin's own addresses on its own port, 443, without SVCB.
    let mut svc = rr(&[Alpn::H2]);
    svc.port = Some(8443);
    let run = Scenario::https()
        .https_rr(10, vec![svc.clone()])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .refuse(V6A, 5)
        .ok(V6A, 10)
        .refuse(V4A, 5)
        .ok(V4A, 10)
        .run();
    let expected = [
        ("[2001:db8::a]:8443".parse().unwrap(), 10),
        ("192.0.2.1:8443".parse().unwrap(), 15),
        ("[2001:db8::a]:443".parse().unwrap(), 20),
    ];
    assert_eq!(run.start_targets(), expected, "{}", run.timeline());
    assert_eq!(run.won(), one(V6A, 30));
    let fallback: Vec<bool> = run.attempts.iter().map(|a| a.plan.without_svcb).collect();
    assert_eq!(fallback, [false, false, true]);
    assert_eq!(
        run.attempts[2].plan.to_string(),
        "tcp [2001:db8::a]:443 (without SVCB) → tls example.com [h2, http/1.1]"
    );

    // A "." record on the origin's own port lists the same endpoints: each is tried once, so
    // the race fails when both refuse.
    let run = Scenario::https()
        .https_rr(10, vec![rr(&[Alpn::H2])])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .refuse(V6A, 5)
        .refuse(V4A, 5)
        .run();
    assert_eq!(
        run.starts(),
        at(&[(V6A, 10), (V4A, 15)]),
        "{}",
        run.timeline()
    );
    assert_eq!(run.failed().map(|(_, t)| t), Some(20));

    // RFC 9848, "Disabling fallback" (E-01): when every record carries `ech`, the client is
    // SVCB-reliant and never connects without it.
    svc.ech = Some(std::sync::Arc::from(&b"an ECHConfigList"[..]));
    let run = Scenario::https()
        .https_rr(10, vec![svc])
        .aaaa(10, &[V6A])
        .a(10, &[V4A])
        .refuse(V6A, 5)
        .ok(V6A, 10)
        .refuse(V4A, 5)
        .ok(V4A, 10)
        .run();
    let ports: Vec<u16> = run.start_targets().iter().map(|(a, _)| a.port()).collect();
    assert_eq!(ports, [8443, 8443], "{}", run.timeline());
    assert_eq!(run.failed().map(|(_, t)| t), Some(20));
}
