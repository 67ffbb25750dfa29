//! Route ordering over large answer sets: RFC 6724 sorting with route memory, postponement,
//! family choice and interleaving, for 16, 64 and 256 addresses.

// criterion_group! and criterion_main! generate undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use fastfallback_proto::{AttemptErrorKind, Instant, Phase};
use fastfallback_route::order::{FamilyPreference, OrderContext, Orderable, order};
use fastfallback_route::{
    HostModel, Lesson, LessonKind, MemoryView, RouteMemory, Source, SourceSelector,
};

#[derive(Clone)]
struct E(SocketAddr, Option<Source>);

impl Orderable for E {
    fn logical(&self) -> IpAddr {
        self.0.ip()
    }
    fn target(&self) -> SocketAddr {
        self.0
    }
    fn source(&self) -> Option<Source> {
        self.1
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
            E(SocketAddr::new(ip, 443), HostModel::e0().source_for(ip))
        })
        .collect()
}

fn route_order(c: &mut Criterion) {
    let mut g = c.benchmark_group("route_order");
    for n in [16usize, 64, 256] {
        let items = answers(n);
        let mut memory = MemoryView::empty(RouteMemory::default());
        let learn = |memory: &mut MemoryView, target, kind| {
            memory.learn(&Lesson {
                target,
                at: Instant::ZERO,
                kind,
            })
        };
        for (i, e) in items.iter().enumerate().step_by(5) {
            let rtt = Duration::from_millis(10 + i as u64);
            learn(&mut memory, e.0, LessonKind::Connected { rtt });
        }
        let refused = LessonKind::Failed {
            kind: AttemptErrorKind::Refused,
            phase: Phase::Tcp,
        };
        learn(&mut memory, items[1].0, refused);
        let ctx = OrderContext {
            memory: Some(&memory),
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
