//! The race core on virtual time: one whole race (DNS, staggered attempts, cancellation) with
//! 2, 8 and 64 candidates, where only the last candidate in the order connects. Measures the
//! engine's own overhead; no sockets.

// criterion_group! and criterion_main! generate undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use fastfallback_sim::Scenario;

fn scenario(n: usize) -> Scenario {
    let v6: Vec<String> = (0..n / 2)
        .map(|i| format!("2001:db8::{:x}", i + 1))
        .collect();
    let v4: Vec<String> = (0..n - n / 2)
        .map(|i| format!("198.51.100.{}", i + 1))
        .collect();
    let v6r: Vec<&str> = v6.iter().map(String::as_str).collect();
    let v4r: Vec<&str> = v4.iter().map(String::as_str).collect();
    Scenario::plain()
        .tune(|p| {
            p.connect_timeout = Duration::from_secs(60);
            p.max_concurrent_attempts = std::num::NonZeroUsize::new(64).unwrap();
            p.answer_limits.max_addresses = 64;
        })
        .aaaa(10, &v6r)
        .a(10, &v4r)
        .ok(v4r.last().copied().unwrap_or("198.51.100.1"), 20)
}

fn race(c: &mut Criterion) {
    let mut g = c.benchmark_group("race");
    for n in [2usize, 8, 64] {
        let s = scenario(n);
        let check = s.run();
        assert!(
            check.won().is_some(),
            "bench scenario must win:\n{}",
            check.timeline()
        );
        g.bench_with_input(BenchmarkId::from_parameter(n), &s, |b, s| {
            b.iter(|| black_box(s.run()))
        });
    }
    g.finish();
}

criterion_group!(benches, race);
criterion_main!(benches);
