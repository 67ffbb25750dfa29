//! `FastFallbackExchangeFinder::lone_opening` keeps its promise: over random literals,
//! schemes, policies, connectivity, route memory and times, a race it names
//! - starts exactly its opening, at its start, and asks nothing else then;
//! - has a timer after its start (the attempt has time to run);
//! - is rebuilt by `after_lone_opening` in exactly the state the race itself is in;
//! - wins in the instant its attempt connects, learns nothing and keeps no DNS tail.
//!
//! A driver that makes the opening itself and builds the race only when it needs it relies on
//! each of these.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fastfallback_plan::{
    ConnectPlan, FallbackPolicy, FamilyPreference, FastFallbackExchangeFinder, LoneOpening,
    RaceInput,
};
use fastfallback_proto::{AttemptEvent, AttemptId, Instant, Output, Winner};
use fastfallback_route::{
    Address, Connectivity, Host, MemoryView, Nat64Prefix, Proxy, Route, RouteMemory, Scheme, Zone,
};
use proptest::prelude::*;

const LITERALS: &[&str] = &[
    "127.0.0.1",
    "::1",
    "192.0.2.1",
    "2001:db8::1",
    "fe80::1",
    "0.0.0.0",
    "::ffff:192.0.2.1",
    "64:ff9b::c000:201",
    "224.0.0.1",
    "10.0.0.1",
];

#[derive(Debug, Clone)]
struct Case {
    ip: IpAddr,
    port: u16,
    scheme: Scheme,
    family: FamilyPreference,
    connectivity: Connectivity,
    memory: bool,
    waiting: bool,
    zone: bool,
    proxy: bool,
    attempt_timeout: u64,
    connect_timeout: u64,
    seed: u64,
    start: u64,
    connect_after: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            prop::sample::select(LITERALS),
            1u16..=u16::MAX,
            prop::sample::select(&[Scheme::Tcp, Scheme::Http, Scheme::Https][..]),
            prop::sample::select(
                &[
                    FamilyPreference::Auto,
                    FamilyPreference::V6First,
                    FamilyPreference::V4First,
                    FamilyPreference::V6Only,
                    FamilyPreference::V4Only,
                ][..],
            ),
            (any::<bool>(), any::<bool>(), prop::bool::weighted(0.3)),
        ),
        (
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
            prop::sample::select(&[0u64, 1, 250, 10_000][..]),
            prop::sample::select(&[0u64, 1, 300, 30_000][..]),
            any::<u64>(),
            0u64..1_000_000,
            0u64..40_000,
        ),
    )
        .prop_map(
            |(
                (ip, port, scheme, family, (v6, v4, nat64)),
                (
                    memory,
                    waiting,
                    zone,
                    proxy,
                    attempt_timeout,
                    connect_timeout,
                    seed,
                    start,
                    connect_after,
                ),
            )| Case {
                ip: ip.parse().expect("literal"),
                port,
                scheme,
                family,
                connectivity: Connectivity {
                    v6,
                    v4,
                    nat64: nat64.then_some(Nat64Prefix::WELL_KNOWN),
                },
                memory,
                waiting,
                zone,
                proxy,
                attempt_timeout,
                connect_timeout,
                seed,
                start,
                connect_after,
            },
        )
}

impl Case {
    fn address(&self) -> Address {
        let mut a = Address::new(Host::Ip(self.ip), self.port, self.scheme).expect("address");
        if self.zone {
            a = a.with_zone(Zone::Index(2));
        }
        if self.proxy {
            a = a.with_proxy(Proxy::http(Host::Ip("192.0.2.9".parse().unwrap()), 3128));
        }
        a
    }

    fn policy(&self) -> Arc<FallbackPolicy> {
        // Set field by field: the builder would refuse some of these timeouts, and the
        // promise holds for every policy.
        let mut policy = FallbackPolicy::default();
        policy.family = self.family;
        policy.attempt_timeout = Duration::from_millis(self.attempt_timeout);
        policy.connect_timeout = Duration::from_millis(self.connect_timeout);
        Arc::new(policy)
    }

    fn input(&self) -> RaceInput {
        let memory = if self.memory {
            MemoryView::empty(RouteMemory::default())
        } else {
            MemoryView::disabled()
        };
        RaceInput::new(self.connectivity)
            .memory(memory)
            .seed(self.seed)
            .waiting(self.waiting)
    }
}

/// Everything the race's state shows from outside, for comparing two races.
fn state(race: &FastFallbackExchangeFinder) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?}",
        race.phase(),
        race.attempts(),
        race.poll_timeout(),
        race.dns_tail_deadline(),
        race.has_lessons()
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_lone_opening_is_what_the_race_does_until_its_attempt_connects(c in case()) {
        let (address, policy, t0) = (c.address(), c.policy(), Instant::from_millis(c.start));
        let Some(opening) = FastFallbackExchangeFinder::lone_opening(&address, &policy, &c.input())
        else {
            return Ok(());
        };
        let mut race =
            FastFallbackExchangeFinder::boxed(address.clone(), Arc::clone(&policy), c.input(), t0);
        prop_assert_eq!(
            race.poll_output(t0),
            Some(Output::StartAttempt { id: opening.id, plan: opening.plan.clone() })
        );
        prop_assert_eq!(race.poll_output(t0), None);
        prop_assert!(race.poll_timeout().is_some_and(|t| t > t0), "{:?}", race.poll_timeout());

        let rebuilt = FastFallbackExchangeFinder::after_lone_opening(
            address,
            Arc::clone(&policy),
            c.input(),
            t0,
        );
        prop_assert_eq!(state(&rebuilt), state(&race));

        let t1 = Instant::from_millis(c.start + c.connect_after);
        race.handle_attempt(opening.id, AttemptEvent::Connected(None), t1);
        prop_assert_eq!(race.poll_output(t1), Some(Output::Done(Winner::Attempt(opening.id))));
        prop_assert_eq!(race.poll_output(t1), None);
        prop_assert!(!race.has_lessons());
        prop_assert_eq!(race.dns_tail_deadline(), None);
        prop_assert_eq!(race.poll_timeout(), None);
    }
}

#[test]
fn a_loopback_or_plain_literal_without_memory_has_a_lone_opening() {
    let policy = FallbackPolicy::default();
    for (literal, scheme) in [
        ("127.0.0.1", Scheme::Tcp),
        ("::1", Scheme::Http),
        ("192.0.2.1", Scheme::Tcp),
    ] {
        let ip: IpAddr = literal.parse().unwrap();
        let address = Address::new(Host::Ip(ip), 8080, scheme).unwrap();
        let input = RaceInput::new(Connectivity::DUAL_STACK);
        assert_eq!(
            FastFallbackExchangeFinder::lone_opening(&address, &policy, &input),
            Some(LoneOpening {
                id: AttemptId::FIRST,
                plan: ConnectPlan::new(Route::direct(SocketAddr::new(ip, 8080)), None),
            }),
            "{literal}"
        );
    }
}

#[test]
fn a_name_tls_memory_or_an_unreachable_family_has_none() {
    let policy = FallbackPolicy::default();
    let v4 = Host::Ip("192.0.2.1".parse().unwrap());
    let dual = RaceInput::new(Connectivity::DUAL_STACK);
    let cases = [
        (
            Address::new(Host::Name("example.test".into()), 80, Scheme::Tcp).unwrap(),
            dual.clone(),
        ),
        (
            Address::new(v4.clone(), 443, Scheme::Https).unwrap(),
            dual.clone(),
        ),
        (
            Address::new(v4.clone(), 80, Scheme::Tcp).unwrap(),
            dual.memory(MemoryView::empty(RouteMemory::default())),
        ),
        (
            Address::new(v4, 80, Scheme::Tcp).unwrap(),
            RaceInput::new(Connectivity {
                v6: true,
                v4: false,
                nat64: None,
            }),
        ),
    ];
    for (address, input) in cases {
        assert_eq!(
            FastFallbackExchangeFinder::lone_opening(&address, &policy, &input),
            None,
            "{address}"
        );
    }
}
