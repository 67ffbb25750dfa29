//! Arbitrary address answers go through aggregation and ordering: no panic, and the order is a
//! permutation of what was admitted. Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run route_answers`.
#![no_main]

use std::net::IpAddr;
use std::time::Duration;

use fastfallback_proto::{DnsAnswer, Family, Instant, QueryKind};
use fastfallback_route::{AnswerLimits, Connectivity, Resolution};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
    let mut r = Resolution::new(
        &[QueryKind::Aaaa, QueryKind::A],
        Connectivity::DUAL_STACK,
        Family::V6,
        Duration::from_millis(50),
        AnswerLimits::default(),
    );
    r.handle_answer(QueryKind::Aaaa, &DnsAnswer::Addresses(addrs.clone()), Instant::ZERO);
    r.handle_answer(QueryKind::A, &DnsAnswer::Addresses(addrs), Instant::from_millis(1));
    let out = r.addresses();
    assert!(out.len() <= 2 * AnswerLimits::default().max_addresses);
    let mut dedup = out.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), out.len());
});
