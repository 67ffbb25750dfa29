//! `fastfallback demo` plays canned race scenarios on virtual time, offline and without root,
//! and prints each one's timeline: what was queried and answered, which attempts started when,
//! how each ended, and who won.

use std::sync::Arc;

use clap::Args;

use fastfallback_proto::{Alpn, AttemptErrorKind, HttpsRecord};
use fastfallback_route::{Connectivity, HostModel, Nat64Prefix, RouteDatabase, RouteMemory};
use fastfallback_sim::{Behaviour, Scenario};

use crate::Outcome;

mod testnet_demo;

/// An AliasMode record to `target`.
fn alias(target: &str) -> HttpsRecord {
    HttpsRecord {
        priority: 0,
        target: target.into(),
        ..Default::default()
    }
}

/// A ServiceMode record for its owner, offering h2, with an ECH configuration.
fn ech_service() -> HttpsRecord {
    HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: vec![Alpn::H2],
        ech: Some(Arc::from(&b"an ECHConfigList"[..])),
        ..Default::default()
    }
}

/// `1 . alpn=h3,h2`: a service reached over QUIC and over TCP.
fn h3_service() -> HttpsRecord {
    HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: vec![Alpn::H3, Alpn::H2],
        ..Default::default()
    }
}

/// A client that speaks QUIC, and an origin whose record offers h3 and h2 (T43's set-up).
fn quic_origin(memory: &Arc<RouteDatabase>) -> Scenario {
    Scenario::https()
        .tune(|p| p.quic = true)
        .memory(memory.clone())
        .https_rr(10, vec![h3_service()])
        .aaaa(10, &["2001:db8::a"])
        .a(10, &["192.0.2.1"])
        .ok_tls("2001:db8::a", 20, 30)
}

fn scenarios() -> Vec<(Scenario, &'static str)> {
    let memory = Arc::new(RouteDatabase::new(RouteMemory::default()));
    let quic_memory = Arc::new(RouteDatabase::new(RouteMemory::default()));
    vec![
        (
            Scenario::plain()
                .named("healthy dual-stack host")
                .aaaa(10, &["2001:db8::a"])
                .a(12, &["192.0.2.1"])
                .ok("2001:db8::a", 20)
                .ok("192.0.2.1", 20),
            "IPv6 answers first and connects; IPv4 is never tried (T01).",
        ),
        (
            Scenario::plain()
                .named("IPv6 blackholed, first contact")
                .memory(memory.clone())
                .aaaa(10, &["2001:db8::a"])
                .a(10, &["192.0.2.1"])
                .drop("2001:db8::a")
                .ok("192.0.2.1", 20),
            "IPv4 starts one Connection Attempt Delay (250 ms) later and wins (T11).",
        ),
        (
            Scenario::plain()
                .named("IPv6 blackholed, second contact")
                .memory(memory)
                .starting_at(5000)
                .aaaa(10, &["2001:db8::a"])
                .a(10, &["192.0.2.1"])
                .drop("2001:db8::a")
                .ok("192.0.2.1", 20),
            "Route memory knows IPv6 is dead on this network: IPv4 goes first.",
        ),
        (
            Scenario::plain()
                .named("slow AAAA answer")
                .a(0, &["192.0.2.1"])
                .aaaa(300, &["2001:db8::a"])
                .ok("192.0.2.1", 20),
            "A arrives first; after the 50 ms Resolution Delay IPv4 goes ahead (T03).",
        ),
        (
            Scenario::plain()
                .named("IPv6 refused at once")
                .aaaa(10, &["2001:db8::a"])
                .a(10, &["192.0.2.1"])
                .refuse("2001:db8::a", 15)
                .ok("192.0.2.1", 20),
            "A refusal of the latest attempt moves on at once (T12).",
        ),
        (
            Scenario::https()
                .named("TLS handshake, three addresses per family")
                .https_rr(10, vec![])
                .aaaa(10, &["2001:db8::a", "2001:db8::b", "2001:db8::c"])
                .a(10, &["192.0.2.1", "192.0.2.2", "192.0.2.3"])
                .behave(
                    "2001:db8::a",
                    Behaviour::TlsFail {
                        tcp: 20,
                        tls: 30,
                        follow_up: None,
                    },
                )
                .ok_tls("192.0.2.1", 300, 40)
                .ok_tls("2001:db8::b", 20, 30),
            "A TLS failure moves on; the fastest full handshake wins; losers are cancelled.",
        ),
        (
            Scenario::https()
                .named("HTTPS alias to a CDN whose record carries ECH")
                .aaaa(10, &["2001:db8::a"])
                .a(10, &[])
                .https_rr(20, vec![alias("cdn.example")])
                .https_rr_for("cdn.example", 120, vec![ech_service()])
                .aaaa_for("cdn.example", 120, &["2001:db8::c"])
                .a_for("cdn.example", 120, &[])
                .ok_tls("2001:db8::a", 20, 30)
                .ok_tls("2001:db8::c", 20, 30),
            "The origin aliases to cdn.example (RFC 9460 §2.4.2). TCP to the origin's own address \
             starts at the Resolution Delay but holds its ClientHello for the CDN's record; that \
             record carries ECH, so the held attempt is withdrawn and the CDN's address goes, \
             encrypted.",
        ),
        (
            Scenario::plain()
                .named("NAT64 network, IPv4-only origin")
                .host(HostModel::v6_only())
                .connectivity(Connectivity {
                    v6: true,
                    v4: false,
                    nat64: Some(Nat64Prefix::WELL_KNOWN),
                })
                .aaaa(10, &[])
                .a(20, &["192.0.2.1"])
                .ok("64:ff9b::c000:201", 20),
            "The A answer is synthesized into 64:ff9b::/96 (T26).",
        ),
        (
            Scenario::plain()
                .named("everything fails")
                .aaaa(10, &["2001:db8::a", "2001:db8::b"])
                .a(10, &["192.0.2.1"])
                .refuse("2001:db8::a", 30)
                .behave(
                    "192.0.2.1",
                    Behaviour::Fail {
                        after: 30,
                        kind: AttemptErrorKind::Unreachable,
                    },
                )
                .refuse("2001:db8::b", 30),
            "The error keeps every attempt's cause, in start order (T19).",
        ),
        (
            quic_origin(&Arc::new(RouteDatabase::new(RouteMemory::default())))
                .named("QUIC answers")
                .quic_ok("2001:db8::a", 30),
            "QUIC leads on the address and its one handshake (TLS inside) wins; TCP never \
             starts (T44).",
        ),
        (
            quic_origin(&quic_memory).named("UDP blocked, first contact"),
            "QUIC gets no answer; TCP starts one attempt delay later on the same address and \
             wins (T43, profile PI). QUIC lost a fair race, so it is remembered broken.",
        ),
        (
            quic_origin(&quic_memory)
                .named("UDP blocked, second contact")
                .starting_at(5000),
            "Broken-QUIC memory: TCP leads and wins; QUIC would follow one attempt delay later \
             (for 5 minutes, doubled each time QUIC loses again).",
        ),
    ]
}

/// `demo`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Play only the scenarios whose name contains NAME.
    #[arg(value_name = "NAME")]
    filter: Option<String>,
    /// Run the real driver on an emulated dual-stack network (network namespaces and a TUN
    /// wire; needs root) with IPv6 blackholed, and draw the first and second contact.
    #[arg(long)]
    testnet: bool,
}

pub(crate) fn run(args: DemoArgs) -> Outcome {
    if args.testnet {
        return testnet_demo::run();
    }
    let filter = args.filter.unwrap_or_default();
    let mut played = 0;
    for (scenario, blurb) in scenarios() {
        if !scenario.name().contains(&filter) {
            continue;
        }
        played += 1;
        let run = scenario.run();
        println!("== {} ==", scenario.name());
        println!("   {blurb}");
        print!("{}", run.timeline());
        println!(
            "   attempts: {}, peak in flight: {}, sockets left open: {}\n",
            run.attempts.len(),
            run.peak_in_flight,
            run.open_sockets
        );
    }
    if played == 0 {
        eprintln!("fastfallback: no scenario matches {filter:?}");
        return Outcome::Failed;
    }
    Outcome::Success
}
