//! `HickoryResolver` keeps the answers hickory gave until their TTL ends, and answers a
//! repeated query from them without a lookup. Against a real DNS server on loopback
//! (`fastfallback_testnet::LoopbackDns`, hickory-server; its records have a 60 s TTL and its
//! negative answers carry an SOA with a 30 s minimum). No root needed.

use std::net::Ipv4Addr;

use fastfallback_net::{HickoryResolver, Resolve};
use fastfallback_proto::{DnsAnswer, DnsError, QueryKind};
use fastfallback_testnet::{DnsZone, LoopbackDns, Rcode};
use hickory_resolver::config::ResolverOpts;

const NAME: &str = "origin.test";

fn server(zone: DnsZone) -> LoopbackDns {
    let dns = LoopbackDns::start().expect("loopback DNS server");
    dns.set_dns(NAME, zone);
    dns
}

fn a_only() -> DnsZone {
    DnsZone {
        a: vec![Ipv4Addr::new(192, 0, 2, 1)],
        ..DnsZone::default()
    }
}

fn v4() -> DnsAnswer {
    DnsAnswer::Addresses(vec![Ipv4Addr::new(192, 0, 2, 1).into()])
}

#[tokio::test]
async fn a_repeated_query_is_answered_from_the_kept_answer_without_a_lookup() {
    let dns = server(a_only());
    let resolver = HickoryResolver::with_name_server(dns.addr()).expect("resolver");
    assert_eq!(resolver.query(NAME, QueryKind::A).await, v4());
    // hickory's own cache is emptied: only the kept answer can spare the server a query.
    resolver.resolver().clear_cache();
    assert_eq!(resolver.query(NAME, QueryKind::A).await, v4());
    assert_eq!(dns.dns_queries(NAME).a, 1);
    // NODATA came with an SOA: it is kept too (RFC 2308 §5).
    assert_eq!(
        resolver.query(NAME, QueryKind::Aaaa).await,
        DnsAnswer::Addresses(Vec::new())
    );
    resolver.resolver().clear_cache();
    assert_eq!(
        resolver.query(NAME, QueryKind::Aaaa).await,
        DnsAnswer::Addresses(Vec::new())
    );
    assert_eq!(dns.dns_queries(NAME).aaaa, 1);
    // Clearing the adapter's cache clears both: the next query reaches the server.
    resolver.clear_cache();
    assert_eq!(resolver.query(NAME, QueryKind::A).await, v4());
    assert_eq!(dns.dns_queries(NAME).a, 2);
}

#[tokio::test]
async fn with_hickorys_cache_off_every_query_reaches_the_server() {
    let dns = server(a_only());
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    let resolver = HickoryResolver::with_name_server_opts(dns.addr(), opts).expect("resolver");
    for _ in 0..3 {
        assert_eq!(resolver.query(NAME, QueryKind::A).await, v4());
    }
    assert_eq!(dns.dns_queries(NAME).a, 3);
}

#[tokio::test]
async fn a_servfail_is_not_kept_and_the_next_query_asks_again() {
    let dns = server(DnsZone {
        rcode: Some(Rcode::ServFail),
        ..a_only()
    });
    let resolver = HickoryResolver::with_name_server(dns.addr()).expect("resolver");
    let servfail = DnsAnswer::Error(DnsError::ServFail);
    assert_eq!(resolver.query(NAME, QueryKind::A).await, servfail);
    // hickory tries a failing server more than once per lookup: count one lookup's queries.
    let one_lookup = dns.dns_queries(NAME).a;
    assert!(one_lookup >= 1);
    resolver.resolver().clear_cache();
    assert_eq!(resolver.query(NAME, QueryKind::A).await, servfail);
    assert_eq!(dns.dns_queries(NAME).a, 2 * one_lookup);
}

#[tokio::test]
async fn a_clone_shares_the_kept_answers() {
    let dns = server(a_only());
    let resolver = HickoryResolver::with_name_server(dns.addr()).expect("resolver");
    let clone = resolver.clone();
    assert_eq!(resolver.query(NAME, QueryKind::A).await, v4());
    clone.resolver().clear_cache();
    assert_eq!(clone.query(NAME, QueryKind::A).await, v4());
    assert_eq!(dns.dns_queries(NAME).a, 1);
}
