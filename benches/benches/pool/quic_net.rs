//! QUIC against TCP on the test network (issue 23's bench rows that need no HTTP/3): the time
//! to a GET's response head from a new client, RTT 20 ms, when the origin's HTTPS record
//! offers `h3` and `h2` but UDP to it is blackholed. Our pool races QUIC against TCP and
//! speaks HTTP/2 on the TCP winner; the rows say what QUIC costs where it cannot work:
//!
//! - our pool with TCP alone (`quic` off), and hyper-util's legacy `Client`, for reference;
//! - our pool racing QUIC, first contact: QUIC leads, TCP starts one attempt delay later
//!   (target: ≤ TCP alone + the attempt delay + 3 ms);
//! - our pool racing QUIC once QUIC is known broken on the network (a first GET to another
//!   host taught it): TCP leads (target: ≤ TCP alone + 3 ms);
//! - our pool racing QUIC to a third host whose UDP works, which speaks HTTP/3: the QUIC
//!   handshake and the request, two round trips (target: ≤ DNS + 2 RTT + 3 ms, the DNS time
//!   read from the race's report);
//! - the same host from a new client that holds a ticket for it (an earlier client, sharing
//!   its TLS session store, made two GETs), with `PoolOptions::early_data`: the GET rides the
//!   resuming attempt's 0-RTT, one round trip (target: ≤ DNS + 1 RTT + 3 ms, the DNS time of
//!   the row above: the same name, from a resolver as new).
//!
//! Built with the benches' `http3` feature (the driver's QUIC step):
//! `cargo bench -p fastfallback-benches --features http3 --bench pool -- quic-net`. Needs
//! root; skipped with a message otherwise.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fastfallback_benches::{hickory, median, williams_row};
use fastfallback_http::{Pool, PoolOptions, SentEarly};
use fastfallback_net::{Connector, FallbackPolicy, HickoryResolver};
use fastfallback_testnet::{DnsZone, HttpsSpec, Match, Rule, ServerKind, TestNet, server_v4};
use http_body_util::BodyExt;

use super::Row;

const ORIGIN: &str = "origin.test";
/// A host whose UDP is not blackholed, on a server address of its own, with HTTP/3.
const H3: &str = "h3.test";
/// The host a first GET goes to, so that the measured one is to a new host. On a server
/// address of its own: one shared with the origin would let the pool coalesce the GET onto
/// the first GET's connection (RFC 9113 §9.1.1), which measures no connect at all.
const OTHER: &str = "other.test";

#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum Who {
    Hyper,
    TcpOnly,
    QuicFirstContact,
    QuicKnownBroken,
    QuicWorks,
    QuicZeroRtt,
}

impl Who {
    const ALL: [Self; 6] = [
        Self::Hyper,
        Self::TcpOnly,
        Self::QuicFirstContact,
        Self::QuicKnownBroken,
        Self::QuicWorks,
        Self::QuicZeroRtt,
    ];

    /// Where this contender's rows are.
    fn index(self) -> usize {
        Self::ALL
            .iter()
            .position(|w| *w == self)
            .unwrap_or_default()
    }

    fn label(self) -> &'static str {
        match self {
            Self::Hyper => "hyper-util legacy Client (hyper-rustls), TCP",
            Self::TcpOnly => "fastfallback Pool, TCP only",
            Self::QuicFirstContact => {
                "fastfallback Pool racing QUIC, UDP blackholed, first contact"
            }
            Self::QuicKnownBroken => "fastfallback Pool racing QUIC, QUIC known broken",
            Self::QuicWorks => "fastfallback Pool racing QUIC, UDP works: HTTP/3",
            Self::QuicZeroRtt => "fastfallback Pool racing QUIC, resumed: the GET in 0-RTT",
        }
    }
}

/// A GET of `/` from `pool` to `host`: ms to the response head (the body is read after),
/// and the race's DNS time (ms to its first answer with addresses).
async fn get_timed(pool: &Pool, host: &str) -> (f64, f64) {
    let t = Instant::now();
    let origin = pool.origin(&format!("https://{host}")).expect("origin");
    let exchange = pool.exchange(&origin).await.expect("exchange");
    let dns = exchange
        .report()
        .and_then(fastfallback_net::RaceReport::breakdown)
        .map_or(0.0, |b| b.dns.as_secs_f64() * 1e3);
    let request = http::Request::get("/").body(Bytes::new()).expect("request");
    let response = exchange.send(request).await.expect("response");
    let head = t.elapsed().as_secs_f64() * 1e3;
    response.into_body().bytes().await.expect("body");
    (head, dns)
}

async fn get(pool: &Pool, host: &str) -> f64 {
    get_timed(pool, host).await.0
}

/// One measured GET of `who`, from a new client: ms to the response head, and the DNS time.
async fn round(who: Who, roots: rustls::RootCertStore) -> (f64, f64) {
    let pool = |quic: bool| {
        let policy = FallbackPolicy::builder()
            .quic(quic)
            .build()
            .expect("policy");
        let connector = Connector::builder()
            .resolver(HickoryResolver::from_resolver(hickory()))
            .root_certificates(roots.clone())
            .policy(policy)
            .build()
            .expect("connector");
        Pool::new(connector)
    };
    match who {
        Who::Hyper => {
            let client = super::warm_net::hyper_client(roots.clone());
            let uri: http::Uri = format!("https://{ORIGIN}/").parse().expect("uri");
            let t = Instant::now();
            let response = client.get(uri).await.expect("hyper-util");
            let head = t.elapsed().as_secs_f64() * 1e3;
            response.into_body().collect().await.expect("body");
            (head, 0.0)
        }
        Who::TcpOnly => get_timed(&pool(false), ORIGIN).await,
        Who::QuicFirstContact => get_timed(&pool(true), ORIGIN).await,
        Who::QuicKnownBroken => {
            let pool = pool(true);
            get(&pool, OTHER).await;
            get_timed(&pool, ORIGIN).await
        }
        Who::QuicWorks => get_timed(&pool(true), H3).await,
        Who::QuicZeroRtt => zero_rtt(roots).await,
    }
}

/// A GET to [`H3`] from a new client whose TLS session store holds a ticket for it, sent in
/// 0-RTT: ms to the response head (the DNS time is not in hand: `Pool::send` returns no
/// report).
async fn zero_rtt(roots: rustls::RootCertStore) -> (f64, f64) {
    // One TLS configuration for both clients: rustls resumes a session only with the
    // certificate verifier that checked it.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let store = Arc::new(rustls::client::ClientSessionMemoryCache::new(16));
    tls.resumption = rustls::client::Resumption::store(store);
    // A new client on that configuration: its own resolver, route memory and pool; 0-RTT on.
    let client = || {
        let policy = FallbackPolicy::builder()
            .quic(true)
            .build()
            .expect("policy");
        let connector = Connector::builder()
            .resolver(HickoryResolver::from_resolver(hickory()))
            .tls_config(tls.clone())
            .policy(policy)
            .build()
            .expect("connector");
        let options = PoolOptions {
            early_data: true,
            ..PoolOptions::default()
        };
        Pool::with_options(connector, options)
    };
    let request = || {
        http::Request::get(format!("https://{H3}/"))
            .body(Bytes::new())
            .expect("request")
    };
    // Two GETs: the ticket (sent after the handshake) is in before the second answer.
    let earlier = client();
    for _ in 0..2 {
        let response = earlier.send(request()).await.expect("a response");
        response.into_body().bytes().await.expect("body");
    }
    let pool = client();
    let t = Instant::now();
    let response = pool.send(request()).await.expect("a response");
    let head = t.elapsed().as_secs_f64() * 1e3;
    assert!(
        response.extensions().get::<SentEarly>().is_some(),
        "quic-net: the GET did not go out in 0-RTT"
    );
    response.into_body().bytes().await.expect("body");
    (head, 0.0)
}

/// The rows: one per contender, the median time to the response head in ms.
pub(super) fn rows(rounds: usize) -> Vec<Row> {
    let net = match TestNet::builder()
        .servers(3)
        .tls_names(&[ORIGIN, OTHER, H3])
        .build()
    {
        Ok(net) => net,
        Err(e) => {
            eprintln!("quic-net: skipped: {}", e.reason());
            return Vec::new();
        }
    };
    let mut rules = Vec::new();
    for (i, name) in [ORIGIN, OTHER, H3].into_iter().enumerate() {
        let v4 = server_v4(i as u8);
        let at = SocketAddr::new(IpAddr::V4(v4), 443);
        if name == H3 {
            let alpn = vec![b"h3".to_vec()];
            net.serve(at, ServerKind::Quic { alpn }).expect("serve h3");
        } else {
            rules.push(Rule::blackhole(Match::Addr(IpAddr::V4(v4))).port(443).udp());
        }
        net.set_dns(
            name,
            DnsZone {
                a: vec![v4],
                https: vec![HttpsSpec::service(1).alpn(["h3", "h2"])],
                ..DnsZone::default()
            },
        );
        let kind = ServerKind::Http {
            alpn: vec![b"h2".to_vec()],
            max_streams: None,
            goaway_first: 0,
        };
        net.serve(at, kind).expect("serve");
        rules.push(Rule::delay(
            Match::Addr(IpAddr::V4(v4)),
            Duration::from_millis(10),
        ));
    }
    net.set_rules(rules);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(net.ca_der()).expect("CA");
    let n = Who::ALL.len();
    let (mut heads, mut dns) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for k in 0..rounds {
        for i in williams_row(n, k) {
            let (head, d) = net.block_on_client(async {
                let timed = round(Who::ALL[i], roots.clone()).await;
                // The round's pools are gone: give their QUIC connections a moment to send
                // CONNECTION_CLOSE before the runtime goes. A connection that vanishes without
                // it stays open on the server until its idle timeout (30 s), and the server
                // busy with many of them slowed the next rounds by about 1.5 ms.
                tokio::time::sleep(Duration::from_millis(20)).await;
                timed
            });
            heads[i].push(head);
            dns[i].push(d);
        }
    }
    // The spread, for the detail: a median near its target is read with its range. (It
    // found one: QUIC attempts took 2 ms longer in some rounds, while quinn zeroed a 3 MB
    // receive buffer per endpoint; `net/src/quic.rs` `gro_off`.)
    let ranges: Vec<(f64, f64)> = heads
        .iter()
        .map(|h| {
            let lo = h.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = h.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo, hi)
        })
        .collect();
    let medians: Vec<f64> = heads.into_iter().map(median).collect();
    let dns: Vec<f64> = dns.into_iter().map(median).collect();
    let tcp = medians[1];
    let delay = FallbackPolicy::default().attempt_delay.as_secs_f64() * 1e3;
    let mut rows = Vec::new();
    for (i, who) in Who::ALL.into_iter().enumerate() {
        let target = match who {
            Who::QuicFirstContact => Some(tcp + delay + 3.0),
            Who::QuicKnownBroken => Some(tcp + 3.0),
            Who::QuicWorks => Some(dns[i] + 2.0 * 20.0 + 3.0),
            // The HTTP/3 row's DNS time (the same name from a new resolver).
            Who::QuicZeroRtt => Some(dns[Who::QuicWorks.index()] + 20.0 + 3.0),
            _ => None,
        };
        let verdict = target.map_or(String::new(), |t| {
            let met = if medians[i] <= t { "met" } else { "NOT met" };
            format!("; target ≤ {t:.1} ms: {met}")
        });
        eprintln!(
            "quic-net: {:<62} head {:>6.1} ms ({:.1}–{:.1}){verdict}",
            who.label(),
            medians[i],
            ranges[i].0,
            ranges[i].1,
        );
        rows.push(Row {
            section: "quic-net",
            contender: who.label(),
            value: medians[i],
            unit: "ms to the response head",
            connections: None,
            rounds,
            detail: Some(format!(
                "GET to a new host, RTT 20 ms, HTTPS record alpn=h3,h2, {}, rounds {:.1}–{:.1} \
                 ms{verdict}",
                if matches!(who, Who::QuicWorks | Who::QuicZeroRtt) {
                    "UDP works"
                } else {
                    "UDP blackholed"
                },
                ranges[i].0,
                ranges[i].1,
            )),
        });
    }
    rows
}
