//! `demo --testnet`: the real driver on an emulated dual-stack network.
//!
//! Two namespaces joined by a TUN wire (crates/testnet): the origin `origin.test` has one IPv6
//! and one IPv4 address, IPv6 is blackholed (SYNs vanish), IPv4 has a 20 ms RTT, and a DNS
//! server inside the network answers AAAA and A at once. One connector contacts the origin
//! twice over TLS: the first contact waits one Connection Attempt Delay for IPv6 before IPv4
//! wins; the second starts on IPv4 at once, because route memory learned IPv6 is dead here.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use fastfallback_net::{Connector, FallbackPolicy, HickoryResolver, RaceReport};
use fastfallback_testnet::{DnsZone, Match, Rule, ServerKind, TestNet, server_v4, server_v6};
use hickory_resolver::config::ResolverOpts;

use crate::Outcome;
use crate::waterfall;

const NAME: &str = "origin.test";

pub(crate) fn run() -> Outcome {
    let net = match TestNet::builder().servers(1).tls_names(&[NAME]).build() {
        Ok(net) => net,
        Err(e) => {
            eprintln!("fastfallback: demo --testnet {e}");
            eprintln!("  (run it as root; `fastfallback demo` without --testnet needs nothing)");
            return Outcome::Setup;
        }
    };
    let (v6, v4) = (IpAddr::V6(server_v6(0)), IpAddr::V4(server_v4(0)));
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            ..DnsZone::default()
        },
    );
    for ip in [v6, v4] {
        let kind = ServerKind::Tls {
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        };
        if let Err(e) = net.serve(SocketAddr::new(ip, 443), kind) {
            eprintln!("fastfallback: cannot start the test server on {ip}: {e}");
            return Outcome::Setup;
        }
    }
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6)),
        Rule::delay(Match::Addr(v4), Duration::from_millis(10)),
    ]);
    println!("Test network: {NAME} is [{v6}]:443 (blackholed) and {v4}:443 (RTT 20 ms).\n");
    let result: Result<Vec<RaceReport>, String> = net.block_on_client(async {
        let connector = connector(&net)?;
        let mut reports = Vec::new();
        for _ in 0..2 {
            let conn = connector
                .connect(&format!("https://{NAME}"))
                .await
                .map_err(|e| e.to_string())?;
            reports.push(conn.into_parts().1);
        }
        Ok(reports)
    });
    match result {
        Ok(reports) => {
            for (title, report) in ["First contact", "Second contact"].iter().zip(&reports) {
                anstream::println!("== {title} ==\n{}", waterfall::render(report, 40));
            }
            Outcome::Success
        }
        Err(e) => {
            eprintln!("fastfallback: the demo's contact failed: {e}");
            Outcome::Failed
        }
    }
}

/// A connector asking the network's DNS server (no cache: each contact sends its queries),
/// trusting the network's CA only.
fn connector(net: &TestNet) -> Result<Connector, String> {
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    let resolver = HickoryResolver::with_name_server_opts(net.dns_server(), opts)
        .map_err(|e| e.to_string())?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(net.ca_der()).map_err(|e| e.to_string())?;
    Connector::builder()
        .policy(FallbackPolicy::default())
        .resolver(resolver)
        .root_certificates(roots)
        // A fixed seed: one race in 64 ignores route memory on purpose (explore_one_in), and
        // the demo is there to show the second contact using it. Seed 0 never draws that.
        .rng_seed(0)
        .build()
        .map_err(|e| e.to_string())
}
