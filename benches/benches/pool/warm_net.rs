//! The warm HTTP/2 batch on the test network (issue 24's first finding): RTT 20 ms to the
//! server, which answers `/sleep/20` after 20 ms of think time, so no request can take less
//! than 40 ms. Each round, each contender (a fresh client) makes one request, which opens its
//! HTTP/2 connection, then 100 at once on that warm connection; per-request latency (p50,
//! p99 over every round's requests), the batch's wall time (median over rounds) and the
//! connections opened by the batch (0 when it stays on the warm connection).
//!
//! The contenders are set up as their users would: our `Pool` with hickory on the test
//! network's DNS server, hyper-util's legacy `Client` with hyper-rustls over an
//! `HttpConnector` with the same hickory resolver, and reqwest told the address (its resolver
//! reads the host's `/etc/resolv.conf`, not the namespace's server; a warm batch resolves
//! nothing either way). Needs root; skipped with a message otherwise.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fastfallback_benches::warm::{Who, percentile};
use fastfallback_benches::{LookupIp, hickory, median, williams_row};
use fastfallback_http::Pool;
use fastfallback_net::{Connector, HickoryResolver};
use fastfallback_testnet::{DnsZone, Match, Rule, ServerKind, TestNet, server_v4};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::Row;

/// Requests in the warm batch.
const BATCH: usize = 100;
/// The server's think time, in the request path.
const PATH: &str = "/sleep/20";
const URL: &str = "https://origin.test";

/// One round of `who`: a fresh client, one request to open its connection, then the batch.
/// Each batch request's latency (ms) and the batch's wall time (ms).
async fn round(who: Who, roots: rustls::RootCertStore, server: SocketAddr) -> (Vec<f64>, f64) {
    let url = format!("{URL}{PATH}");
    match who {
        Who::Ours => {
            let connector = Connector::builder()
                .resolver(HickoryResolver::from_resolver(hickory()))
                .root_certificates(roots)
                .build()
                .expect("connector");
            let pool = Pool::new(connector);
            let origin = pool.origin(URL).expect("origin");
            let get = || async {
                let t = Instant::now();
                let exchange = pool.exchange(&origin).await.expect("exchange");
                let request = http::Request::get(PATH)
                    .body(Bytes::new())
                    .expect("request");
                let body = exchange.send(request).await.expect("response").into_body();
                body.bytes().await.expect("body");
                t.elapsed().as_secs_f64() * 1e3
            };
            batch(get).await
        }
        Who::Hyper => {
            let client = hyper_client(roots);
            let uri: http::Uri = url.parse().expect("uri");
            let get = || async {
                let t = Instant::now();
                let response = client.get(uri.clone()).await.expect("hyper-util");
                response.into_body().collect().await.expect("body");
                t.elapsed().as_secs_f64() * 1e3
            };
            batch(get).await
        }
        Who::Reqwest => {
            let client = reqwest::Client::builder()
                .use_preconfigured_tls(client_config(roots, true))
                .resolve("origin.test", server)
                .build()
                .expect("reqwest");
            let get = || async {
                let t = Instant::now();
                let response = client.get(&url).send().await.expect("reqwest");
                response.bytes().await.expect("body");
                t.elapsed().as_secs_f64() * 1e3
            };
            batch(get).await
        }
    }
}

/// One request on its own (the connection opens), then [`BATCH`] at once.
async fn batch<F: Future<Output = f64>>(get: impl Fn() -> F) -> (Vec<f64>, f64) {
    get().await;
    let t = Instant::now();
    let latencies = futures::future::join_all((0..BATCH).map(|_| get())).await;
    (latencies, t.elapsed().as_secs_f64() * 1e3)
}

/// The hyper-util contender as its users set it up: the legacy `Client` over hyper-rustls over
/// an `HttpConnector` resolving through hickory on the test network's DNS server.
pub(super) fn hyper_client(
    roots: rustls::RootCertStore,
) -> Client<hyper_rustls::HttpsConnector<HttpConnector<LookupIp>>, Empty<Bytes>> {
    let mut http = HttpConnector::new_with_resolver(LookupIp(hickory()));
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(client_config(roots, false))
        .https_only()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new()).build(https)
}

pub(super) fn client_config(roots: rustls::RootCertStore, alpn: bool) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    if alpn {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    }
    config
}

/// The rows: one per contender, p50 latency in ms.
pub(super) fn rows(rounds: usize) -> Vec<Row> {
    let net = match TestNet::builder()
        .servers(1)
        .tls_names(&["origin.test"])
        .build()
    {
        Ok(net) => net,
        Err(e) => {
            eprintln!("warm-net: skipped: {}", e.reason());
            return Vec::new();
        }
    };
    let v4 = server_v4(0);
    let server = SocketAddr::new(IpAddr::V4(v4), 443);
    net.set_dns(
        "origin.test",
        DnsZone {
            a: vec![v4],
            ..DnsZone::default()
        },
    );
    net.serve(
        server,
        ServerKind::Http {
            alpn: vec![b"h2".to_vec()],
            max_streams: None,
            goaway_first: 0,
        },
    )
    .expect("serve");
    net.set_rules(vec![Rule::delay(
        Match::Addr(IpAddr::V4(v4)),
        Duration::from_millis(10),
    )]);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(net.ca_der()).expect("CA");
    let n = Who::ALL.len();
    let (mut latencies, mut walls, mut opened) =
        (vec![Vec::new(); n], vec![Vec::new(); n], vec![0; n]);
    for k in 0..rounds {
        for i in williams_row(n, k) {
            let before = net.accepted(server);
            let roots = roots.clone();
            let (l, wall) = net.block_on_client(round(Who::ALL[i], roots, server));
            // The first request's connection is the warm one.
            opened[i] += net.accepted(server) - before - 1;
            latencies[i].extend(l);
            walls[i].push(wall);
        }
    }
    let mut rows = Vec::new();
    for (i, who) in Who::ALL.into_iter().enumerate() {
        let (p50, p99) = (
            percentile(latencies[i].clone(), 0.5),
            percentile(latencies[i].clone(), 0.99),
        );
        let wall = median(walls[i].clone());
        eprintln!(
            "warm-net h2 ×{BATCH}: {:<42} p50 {p50:>6.1} ms  p99 {p99:>6.1} ms  batch {wall:>6.1} ms  extra connections {}",
            who.label(),
            opened[i]
        );
        rows.push(Row {
            section: "warm-net",
            contender: who.label(),
            value: p50,
            unit: "ms p50",
            connections: Some(opened[i] as f64 / rounds as f64),
            rounds,
            detail: Some(format!(
                "h2, RTT 20 ms, think 20 ms, {BATCH} at once on a warm connection; p99 {p99:.1} ms, batch {wall:.1} ms (limit 40 ms, target p50 ≤ 45 ms)"
            )),
        });
    }
    rows
}
