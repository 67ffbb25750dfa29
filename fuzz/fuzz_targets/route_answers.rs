//! Arbitrary DNS answer sets, HTTPS records included, go through aggregation and ordering:
//! no panic; the address list has no duplicates, respects the caps, and holds only addresses
//! that came in an answer or a hint of a usable record; a record with port 0 or a malformed
//! one never contributes. Every name the records lead to is answered with the same record
//! set, so aliases chain and loop: no query is asked twice, and no more than
//! `MAX_ALIAS_CHAIN` HTTPS follow-ups are. Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run route_answers`.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use fastfallback_proto::{Alpn, DnsAnswer, Family, HttpsRecord, Instant, Query, QueryKind};
use fastfallback_route::{AnswerLimits, Connectivity, MAX_ALIAS_CHAIN, MAX_TARGET_NAMES, Resolution};
use libfuzzer_sys::fuzz_target;

fn addresses(data: &[u8]) -> Vec<IpAddr> {
    let mut addrs = Vec::new();
    for chunk in data.chunks(17) {
        if chunk.len() == 17 && chunk[0] & 1 == 0 {
            let mut b = [0u8; 16];
            b.copy_from_slice(&chunk[1..]);
            addrs.push(IpAddr::from(b));
        } else if chunk.len() >= 5 {
            addrs.push(IpAddr::from([chunk[1], chunk[2], chunk[3], chunk[4]]));
        }
    }
    addrs
}

/// HTTPS records from 8-byte chunks: priority, flags, port, one hint of each family.
fn records(data: &[u8]) -> Vec<HttpsRecord> {
    data.chunks(8)
        .filter(|c| c.len() == 8)
        .map(|c| HttpsRecord {
            priority: u16::from(c[0] % 4),
            target: [".", "svc.example.", "Alt.Example", "example.com", "n1.example", "bad..name"]
                [usize::from(c[6] % 6)]
                .into(),
            alpn: match c[1] >> 1 & 3 {
                0 => vec![Alpn::H2],
                1 => vec![Alpn::H3],
                2 => vec![Alpn::Http11, Alpn::H2],
                _ => Vec::new(),
            },
            no_default_alpn: c[1] & 8 != 0,
            port: (c[1] & 16 != 0).then(|| u16::from_be_bytes([c[2], c[3]])),
            ipv4hint: vec![Ipv4Addr::new(192, 0, 2, c[4])],
            ipv6hint: vec![Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(c[5]))],
            unknown_mandatory: c[1] & 32 != 0,
            malformed: (c[1] & 64 != 0).then(|| "fuzzed".to_owned()),
            ech: (c[1] & 128 != 0).then(|| std::sync::Arc::from(&c[6..])),
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let (https_bytes, addr_bytes) = data.split_at(split);
    let https = records(https_bytes);
    let addrs = addresses(addr_bytes);
    let mut r = Resolution::new(
        &[QueryKind::Https, QueryKind::Aaaa, QueryKind::A],
        Connectivity::DUAL_STACK,
        Family::V6,
        Duration::from_millis(50),
        AnswerLimits::default(),
    )
    .seeded(u64::from(data.len() as u32))
    .named("example.com");
    let origin = |k| Query::origin(k);
    r.handle_answer(&origin(QueryKind::Https), &DnsAnswer::Https(https.clone()), Instant::ZERO);
    r.handle_answer(&origin(QueryKind::Aaaa), &DnsAnswer::Addresses(addrs.clone()), Instant::ZERO);
    let mut asked: Vec<Query> = Vec::new();
    for _ in 0..64 {
        let next: Vec<Query> = r.take_queries().collect();
        if next.is_empty() {
            break;
        }
        for q in next {
            assert!(!q.is_origin(), "{q} asked again");
            assert!(!asked.contains(&q), "{q} asked twice");
            let answer = match q.kind {
                QueryKind::Https => DnsAnswer::Https(https.clone()),
                _ => DnsAnswer::Addresses(addrs.clone()),
            };
            r.handle_answer(&q, &answer, Instant::from_millis(1));
            asked.push(q);
        }
    }
    assert!(r.take_queries().next().is_none(), "follow-ups never end");
    let names: std::collections::BTreeSet<_> = asked.iter().map(|q| q.name.clone()).collect();
    assert!(names.len() <= MAX_TARGET_NAMES, "{} names asked about", names.len());
    let https_follow_ups = asked.iter().filter(|q| q.kind == QueryKind::Https).count();
    assert!(https_follow_ups <= MAX_ALIAS_CHAIN, "{https_follow_ups} aliases followed");
    r.handle_answer(&origin(QueryKind::A), &DnsAnswer::Addresses(addrs.clone()), Instant::from_millis(1));
    let _ = r.poll(Instant::from_millis(60));
    let out = r.addresses();
    let names = 1 + asked.len();
    assert!(out.len() <= names * (2 * AnswerLimits::default().max_addresses + 2 * https.len()));
    let mut dedup = out.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), out.len(), "duplicates in {out:?}");
    let usable_hint = |ip: &IpAddr| {
        https.iter().any(|h| {
            h.port != Some(0)
                && h.malformed.is_none()
                && !h.unknown_mandatory
                && (h.ipv4hint.iter().any(|v| IpAddr::V4(*v) == *ip)
                    || h.ipv6hint.iter().any(|v| IpAddr::V6(*v) == *ip))
        })
    };
    let answered = |ip: &IpAddr| {
        addrs.iter().any(|a| {
            let a = match a {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(*a, IpAddr::V4),
                v4 => *v4,
            };
            a == *ip
        })
    };
    for ip in &out {
        assert!(answered(ip) || usable_hint(ip), "{ip} came from nowhere");
    }
});
