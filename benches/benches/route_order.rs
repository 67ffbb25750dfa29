//! Route ordering over large answer sets: RFC 6724 sorting with route memory, postponement,
//! family choice and interleaving, for 16, 64 and 256 addresses.

// criterion_group! and criterion_main! generate undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use fastfallback_proto::{AttemptErrorKind, Instant};
use fastfallback_route::order::{FamilyPreference, OrderContext, Orderable, order};
use fastfallback_route::{HostModel, RouteDatabase, RouteMemory};

#[derive(Clone)]
struct E(SocketAddr);

impl Orderable for E {
    fn logical(&self) -> IpAddr {
        self.0.ip()
    }
    fn target(&self) -> SocketAddr {
        self.0
    }
}

fn answers(n: usize) -> Vec<E> {
    (0..n)
        .map(|i| {
            let ip: IpAddr = if i % 3 == 0 {
                IpAddr::from([198, 51, 100, (i % 250) as u8])
            } else {
                IpAddr::from([0x2001, 0xdb8, (i % 7) as u16, 0, 0, 0, 0, i as u16])
            };
            E(SocketAddr::new(ip, 443))
        })
        .collect()
}

fn route_order(c: &mut Criterion) {
    let host = HostModel::e0();
    let db = RouteDatabase::new(RouteMemory::default());
    let mut g = c.benchmark_group("route_order");
    for n in [16usize, 64, 256] {
        let items = answers(n);
        for (i, e) in items.iter().enumerate().step_by(5) {
            db.connected(e.0, Duration::from_millis(10 + i as u64), Instant::ZERO);
        }
        db.failed(items[1].0, AttemptErrorKind::Refused, Instant::ZERO);
        let ctx = OrderContext {
            sources: &host,
            db: Some(&db),
            preference: FamilyPreference::Auto,
            preferred_family_count: 1,
            slower_margin: Duration::from_millis(100),
            now: Instant::from_millis(1),
        };
        g.bench_with_input(BenchmarkId::from_parameter(n), &items, |b, items| {
            b.iter(|| black_box(order(items.clone(), &ctx)))
        });
    }
    g.finish();
}

criterion_group!(benches, route_order);
criterion_main!(benches);
