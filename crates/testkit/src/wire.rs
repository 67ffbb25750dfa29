//! Tests on a real dual-stack network (crates/testnet): the one-test-at-a-time guard that
//! checks no socket is left, connectors that ask the network's DNS server, and readings of the
//! race's report and the wire's log.

use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use fastfallback_net::{
    ConnectError, Connector, ConnectorBuilder, FallbackPolicy, HickoryResolver, RaceReport,
};
use fastfallback_proto::QueryKind;
use fastfallback_route::Proxy;
use fastfallback_testnet::{
    DnsZone, ServerKind, SocketProto, TestNet, or_skip, server_v4, server_v6,
};
use hickory_resolver::config::ResolverOpts;

use crate::Millis;

/// A connector builder that asks the network's DNS server, with no resolver cache (each
/// contact sends its queries), and trusts the network's CA only.
pub fn builder(net: &TestNet) -> ConnectorBuilder {
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    let resolver = HickoryResolver::with_name_server_opts(net.dns_server(), opts).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(net.ca_der()).unwrap();
    Connector::builder()
        .resolver(resolver)
        .root_certificates(roots)
}

/// One test at a time: the timings should not depend on what the other core is doing.
static SERIAL: Mutex<()> = Mutex::new(());

/// The origin's name in every test network.
pub const NAME: &str = "origin.test";
/// The public name of the ECH configurations the tests publish (the certificate covers it).
pub const PUBLIC_NAME: &str = "public.test";
/// The port plain TCP servers listen on.
pub const PORT: u16 = 80;
/// The port TLS and HTTP servers listen on.
pub const TLS_PORT: u16 = 443;
/// The round trip the tests give the wire.
pub const RTT: Duration = Duration::from_millis(20);
/// How late one timing read off the race's report or the wire's log may be.
///
/// Nothing happens early, so every lower bound is tight (−1 ms, for rounding between the
/// wire's clock and the race's). Upper bounds are loose: the wire's delays are kept by a
/// userspace thread, the DNS server and the race run on the same two cores as the rest of
/// CI, and a busy VM has made a 20 ms RTT take 30 ms and an answer come 25 ms late. The
/// exact timelines are asserted on virtual time (the sim in `crates/plan`, the driver's
/// paused-time tests); here each upper bound only has to tell the behaviour under test from
/// the wrong one it guards against, and each of those is more than this far away.
pub const SLACK: f64 = 25.0;

/// Server `i`'s IPv6 address.
pub fn v6(i: u8) -> IpAddr {
    IpAddr::V6(server_v6(i))
}

/// Server `i`'s IPv4 address.
pub fn v4(i: u8) -> IpAddr {
    IpAddr::V4(server_v4(i))
}

/// Half a round trip: the one-way delay of a wire with this RTT.
pub fn half(rtt: Duration) -> Duration {
    rtt / 2
}

/// A test's network, held one test at a time. When the test ends without a panic, it checks
/// that the client namespace holds no socket: nothing the test opened is left open.
pub struct Net {
    /// The network.
    pub net: TestNet,
    _serial: MutexGuard<'static, ()>,
}

impl Deref for Net {
    type Target = TestNet;
    fn deref(&self) -> &TestNet {
        &self.net
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert_no_client_sockets(&self.net);
        }
    }
}

/// A network with `origin.test` at server 0 of each family and TCP servers on port 80 of both.
pub fn network(test: &str) -> Option<Net> {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let net = or_skip(
        test,
        TestNet::builder()
            .servers(4)
            .tls_names(&[NAME, PUBLIC_NAME])
            .build(),
    )?;
    net.set_dns(
        NAME,
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            ..DnsZone::default()
        },
    );
    for ip in [v6(0), v4(0)] {
        net.serve(SocketAddr::new(ip, PORT), ServerKind::Accept)
            .unwrap();
    }
    Some(Net {
        net,
        _serial: serial,
    })
}

/// One contact with `origin.test:80` from the client namespace.
pub fn contact(net: &TestNet, policy: FallbackPolicy) -> Result<RaceReport, ConnectError> {
    net.block_on_client(async {
        let origin = format!("{NAME}:{PORT}");
        let conn = connector(net, policy).connect(&origin).await?;
        Ok(conn.into_parts().1)
    })
}

/// A connector that asks the network's DNS server, with no resolver cache (each contact
/// sends its queries) and the test CA as the only root.
pub fn connector(net: &TestNet, policy: FallbackPolicy) -> Connector {
    connector_via(net, policy, None)
}

/// [`connector`], connecting through `proxy` when given.
pub fn connector_via(net: &TestNet, policy: FallbackPolicy, proxy: Option<Proxy>) -> Connector {
    let builder = builder(net)
        .policy(policy)
        // Seeds 0..6 never make a race ignore history, so memory tests are repeatable.
        .rng_seed(0);
    match proxy {
        Some(p) => builder.proxy(p),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Fails the test if the client namespace still holds any socket.
pub fn assert_no_client_sockets(net: &TestNet) {
    let left = net.client_sockets().unwrap();
    assert!(
        left.is_empty(),
        "sockets left in the client namespace: {left:#?}"
    );
}

/// TCP sockets the client namespace holds now.
pub fn client_tcp_sockets(net: &TestNet) -> usize {
    net.client_sockets()
        .unwrap()
        .iter()
        .filter(|s| s.proto == SocketProto::Tcp)
        .count()
}

/// Asserts that `got` is `want` or up to [`SLACK`] later (never more than 1 ms earlier).
pub fn assert_near(what: &str, got: f64, want: f64) {
    assert!(
        got >= want - 1.0 && got <= want + SLACK,
        "{what}: {got:.1} ms, expected {want:.1} ms (−1/+{SLACK} ms)"
    );
}

/// When the race had the answer to its `kind` query, in ms on the race's clock.
pub fn answered_ms(report: &RaceReport, kind: QueryKind) -> f64 {
    report
        .queries
        .iter()
        .find(|q| q.kind == kind)
        .and_then(|q| q.answered)
        .map(|at| at.ms())
        .unwrap_or_else(|| panic!("a {kind:?} answer\n{report}"))
}

/// The wire's SYNs, as (ms after the first SYN, destination).
pub fn syn_offsets(net: &TestNet) -> Vec<(f64, SocketAddr)> {
    let syns = net.syns();
    let Some(&(t0, _)) = syns.first() else {
        return Vec::new();
    };
    syns.iter()
        .map(|(t, dst)| (t.duration_since(t0).as_secs_f64() * 1e3, *dst))
        .collect()
}
