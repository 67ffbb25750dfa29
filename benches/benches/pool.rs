//! Connection reuse, measured: checkout and lease costs, and 100 concurrent calls to a new
//! HTTP/2 host side by side with hyper-util's legacy `Client` (its own pool, HTTP/1 and
//! HTTP/2 on, TLS glue as its users write it).
//!
//! ```text
//! cargo bench -p fastfallback-benches --bench pool              # everything
//! cargo bench -p fastfallback-benches --bench pool -- checkout  # sections whose name matches
//! ```
//!
//! Sections:
//!
//! - `checkout`: an idle HTTP/1 connection taken from the pool and given back
//!   (`Pool::exchange` on a pooled connection, then dropping the exchange), ns per op, on one
//!   thread and on two threads at once (two idle connections), median of 30 batches.
//! - `lease`: the same on a pooled HTTP/2 connection: one stream leased and freed.
//! - `concurrent`: 100 calls at once to a new HTTP/2-over-TLS origin on loopback, from a
//!   fresh pool (fresh client): connections the server accepted and time until all 100
//!   responses are read; median of the rounds.
//! - `blackhole`: the same on the dual-stack test network with IPv6 blackholed and a 10 ms
//!   RTT to IPv4 (needs root; skipped with a message otherwise).
//! - `warm`: the request path on a warm pool against hyper-util's legacy `Client`
//!   (hyper-rustls) and reqwest: loopback TLS, HTTP/2 and HTTP/1.1, 1, 64 and 256 requests in
//!   flight; requests per second, p50 and p99 ([`warm`]).
//! - `warm-net`: 100 requests at once on one warm HTTP/2 connection on the test network,
//!   RTT 20 ms, server think time 20 ms, against the same two (needs root; [`warm_net`]).
//! - `quic-net` (with the `http3` feature): a GET to a new host whose UDP is blackholed, our
//!   pool racing QUIC against TCP, first contact and once QUIC is known broken, beside TCP
//!   alone and hyper-util (needs root; `quic_net`).
//!
//! Results go to `target/fastfallback-bench/pool.json` and stdout.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fastfallback_benches::warm::{call, loopback_connector, roots, server};
use fastfallback_benches::{HyperTls, LookupIp, hickory, median};
use fastfallback_http::{Origin, Pool};
use fastfallback_net::{Connector, FallbackPolicy, HickoryResolver};
use fastfallback_testnet::{
    DnsZone, Match, Rule, ServerKind, TestNet, TlsMaterial, server_v4, server_v6,
};
use futures::FutureExt;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;

#[cfg(feature = "http3")]
#[path = "pool/quic_net.rs"]
mod quic_net;
#[path = "pool/warm.rs"]
mod warm;
#[path = "pool/warm_net.rs"]
mod warm_net;

const CALLS: usize = 100;

#[derive(Serialize)]
struct Row {
    section: &'static str,
    contender: &'static str,
    /// ns per op (checkout, lease) or ms until all responses (concurrent, blackhole).
    value: f64,
    unit: &'static str,
    /// Connections the server accepted per round (concurrent, blackhole), or while measured
    /// (warm).
    connections: Option<f64>,
    rounds: usize,
    /// What the row measured beyond its value (warm: protocol, concurrency, latencies).
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let tls = TlsMaterial::new(&["a.test".to_owned()], &[IpAddr::from([127, 0, 0, 1])])
        .expect("TLS material");
    let mut rows = Vec::new();
    let batches = if full { 30 } else { 3 };
    if wanted("checkout") {
        rows.extend(checkout(&rt, &tls, false, batches));
    }
    if wanted("lease") {
        rows.extend(checkout(&rt, &tls, true, batches));
    }
    if wanted("concurrent") {
        rows.extend(concurrent_loopback(&rt, &tls, if full { 15 } else { 2 }));
    }
    if wanted("blackhole") {
        rows.extend(concurrent_blackhole(if full { 5 } else { 1 }));
    }
    if wanted("warm") {
        rows.extend(warm::rows(&tls, full));
    }
    if wanted("warm-net") {
        rows.extend(warm_net::rows(if full { 7 } else { 1 }));
    }
    #[cfg(feature = "http3")]
    if wanted("quic-net") {
        rows.extend(quic_net::rows(if full { 11 } else { 1 }));
    }
    print(&rows);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fastfallback-bench");
    let _ = std::fs::create_dir_all(&dir);
    let json = serde_json::to_string_pretty(&rows).expect("json");
    if let Err(e) = std::fs::write(dir.join("pool.json"), json) {
        eprintln!("cannot write pool.json: {e}");
    }
}

fn print(rows: &[Row]) {
    println!(
        "{:<12} {:<34} {:>12} {:>8} {:>12}",
        "section", "contender", "value", "unit", "connections"
    );
    for r in rows {
        let conns = r
            .connections
            .map_or_else(String::new, |c| format!("{c:.0}"));
        println!(
            "{:<12} {:<34} {:>12.1} {:>8} {:>12} {}",
            r.section,
            r.contender,
            r.value,
            r.unit,
            conns,
            r.detail.as_deref().unwrap_or("")
        );
    }
}

/// Checkout plus give-back on a warm pool, ns per op: one thread, then two at once.
fn checkout(rt: &tokio::runtime::Runtime, tls: &TlsMaterial, h2: bool, batches: usize) -> Vec<Row> {
    let (section, what) = if h2 {
        ("lease", "HTTP/2 stream lease")
    } else {
        ("checkout", "idle HTTP/1 checkout")
    };
    let (pool, origin) = rt.block_on(async {
        let (port, _stats) = server(tls, if h2 { &b"h2"[..] } else { &b"http/1.1"[..] }).await;
        let pool = Pool::new(loopback_connector(tls));
        let origin = pool
            .origin(&format!("https://127.0.0.1:{port}"))
            .expect("origin");
        // Two connections for HTTP/1, so two threads each find one idle.
        let (a, b) = (
            pool.exchange(&origin).await.expect("a"),
            pool.exchange(&origin).await.expect("b"),
        );
        drop((a, b));
        call(&pool, &origin).await;
        // The connection's task signals it is ready for the next request right after the
        // response; give it that moment, so the measured loop starts warm.
        tokio::time::sleep(Duration::from_millis(20)).await;
        (pool, origin)
    });
    let op = |pool: &Pool, origin: &Origin| {
        let exchange = pool
            .exchange(origin)
            .now_or_never()
            .expect("a pooled connection is handed out without waiting")
            .expect("exchange");
        drop(exchange);
    };
    let per_batch = 20_000;
    let run = |pool: &Pool, origin: &Origin| -> Vec<f64> {
        for _ in 0..per_batch {
            op(pool, origin);
        }
        (0..batches)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..per_batch {
                    op(pool, origin);
                }
                t.elapsed().as_nanos() as f64 / per_batch as f64
            })
            .collect()
    };
    let one = median(run(&pool, &origin));
    // The checkout alone: each op timed on its own, the give-back outside the timed part,
    // minus what two clock reads cost (measured the same way).
    let timed = per_batch * batches;
    let mut alone = Vec::with_capacity(timed);
    let mut clock = Vec::with_capacity(timed);
    for _ in 0..timed {
        let t0 = Instant::now();
        let exchange = pool
            .exchange(&origin)
            .now_or_never()
            .expect("ready")
            .expect("exchange");
        let t1 = Instant::now();
        drop(exchange);
        alone.push(t1.duration_since(t0).as_nanos() as f64);
        let t2 = Instant::now();
        clock.push(Instant::now().duration_since(t2).as_nanos() as f64);
    }
    let alone = median(alone) - median(clock);
    if std::env::var_os("FF_POOL_ONE_THREAD").is_some() {
        return Vec::new();
    }
    let barrier = Arc::new(Barrier::new(2));
    let two: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (pool, origin, barrier) = (pool.clone(), origin.clone(), Arc::clone(&barrier));
                let run = &run;
                s.spawn(move || {
                    barrier.wait();
                    run(&pool, &origin)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    let stats = pool.stats();
    assert_eq!(
        stats.connections,
        if h2 { 1 } else { 2 },
        "nothing was opened or lost"
    );
    drop(pool);
    vec![
        Row {
            section,
            contender: if h2 {
                "fastfallback, take only, 1 thread (h2)"
            } else {
                "fastfallback, take only, 1 thread"
            },
            value: alone,
            unit: "ns/op",
            connections: None,
            rounds: timed,
            detail: None,
        },
        Row {
            section,
            contender: if h2 {
                "fastfallback, + free, 1 thread (h2)"
            } else {
                "fastfallback, + give-back, 1 thread"
            },
            value: one,
            unit: "ns/op",
            connections: None,
            rounds: batches,
            detail: None,
        },
        Row {
            section,
            contender: if h2 {
                "fastfallback, + free, 2 threads (h2)"
            } else {
                "fastfallback, + give-back, 2 threads"
            },
            value: median(two),
            unit: "ns/op",
            connections: None,
            rounds: batches * 2,
            detail: None,
        },
    ]
    .into_iter()
    .inspect(|r| eprintln!("{what}: {} {:.1} ns/op", r.contender, r.value))
    .collect()
}

/// Runs `CALLS` calls at once through a fresh client; returns ms until all are done.
async fn burst_ours(pool: Pool, url: &str) -> f64 {
    let origin = pool.origin(url).expect("origin");
    let t = Instant::now();
    let calls = (0..CALLS).map(|_| {
        let (pool, origin) = (pool.clone(), origin.clone());
        tokio::spawn(async move { call(&pool, &origin).await })
    });
    for r in futures::future::join_all(calls).await {
        r.expect("call");
    }
    t.elapsed().as_secs_f64() * 1e3
}

async fn burst_hyper<R>(client: Client<HyperTls<R>, Empty<Bytes>>, url: &str) -> f64
where
    R: tower_service::Service<hyper_util::client::legacy::connect::dns::Name>
        + Clone
        + Send
        + Sync
        + 'static,
    R::Response: Iterator<Item = SocketAddr>,
    R::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    R::Future: Send,
{
    let uri: http::Uri = url.parse().expect("uri");
    let t = Instant::now();
    let calls = (0..CALLS).map(|_| {
        let (client, uri) = (client.clone(), uri.clone());
        tokio::spawn(async move {
            let response = client.get(uri).await.expect("hyper-util request");
            let body = response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            assert_eq!(body.as_ref(), b"ok");
        })
    });
    for r in futures::future::join_all(calls).await {
        r.expect("call");
    }
    t.elapsed().as_secs_f64() * 1e3
}

fn concurrent_rows(
    section: &'static str,
    rounds: usize,
    ours: (Vec<f64>, Vec<f64>),
    hyper: (Vec<f64>, Vec<f64>),
) -> Vec<Row> {
    let row = |contender, (times, conns): (Vec<f64>, Vec<f64>)| Row {
        section,
        contender,
        value: median(times),
        unit: "ms",
        connections: Some(median(conns)),
        rounds,
        detail: None,
    };
    vec![
        row("fastfallback Pool", ours),
        row("hyper-util legacy Client", hyper),
    ]
}

/// 100 calls at once to a new h2 origin on loopback, each round from a fresh client.
fn concurrent_loopback(rt: &tokio::runtime::Runtime, tls: &TlsMaterial, rounds: usize) -> Vec<Row> {
    rt.block_on(async {
        let (port, stats) = server(tls, b"h2").await;
        let url = format!("https://127.0.0.1:{port}");
        let (mut ours, mut hyper) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for _ in 0..rounds {
            let before = stats.connections();
            ours.0
                .push(burst_ours(Pool::new(loopback_connector(tls)), &url).await);
            ours.1.push((stats.connections() - before) as f64);

            let before = stats.connections();
            let client = Client::builder(TokioExecutor::new())
                .build(HyperTls::new(HttpConnector::new(), roots(tls)));
            hyper.0.push(burst_hyper(client, &url).await);
            hyper.1.push((stats.connections() - before) as f64);
        }
        concurrent_rows("concurrent", rounds, ours, hyper)
    })
}

/// The same on the test network, IPv6 blackholed, 10 ms RTT to IPv4, names through its DNS.
fn concurrent_blackhole(rounds: usize) -> Vec<Row> {
    let net = match TestNet::builder()
        .servers(1)
        .tls_names(&["origin.test"])
        .build()
    {
        Ok(net) => net,
        Err(e) => {
            eprintln!("blackhole: skipped: {}", e.reason());
            return Vec::new();
        }
    };
    let (v6, v4) = (IpAddr::V6(server_v6(0)), IpAddr::V4(server_v4(0)));
    net.set_dns(
        "origin.test",
        DnsZone {
            aaaa: vec![server_v6(0)],
            a: vec![server_v4(0)],
            ..DnsZone::default()
        },
    );
    for ip in [v6, v4] {
        net.serve(
            SocketAddr::new(ip, 443),
            ServerKind::Http {
                alpn: vec![b"h2".to_vec()],
                max_streams: None,
                goaway_first: 0,
            },
        )
        .expect("serve");
    }
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6)),
        Rule::delay(Match::Addr(v4), Duration::from_millis(5)),
    ]);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(net.ca_der()).expect("CA");
    let url = "https://origin.test:443";
    let accepted = || net.accepted(SocketAddr::new(v4, 443)) as f64;
    let (mut ours, mut hyper) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for _ in 0..rounds {
        let before = accepted();
        let roots_ours = roots.clone();
        ours.0.push(net.block_on_client(async move {
            let connector = Connector::builder()
                .resolver(HickoryResolver::from_resolver(hickory()))
                .root_certificates(roots_ours)
                .policy(FallbackPolicy::default())
                .build()
                .expect("connector");
            burst_ours(Pool::new(connector), url).await
        }));
        ours.1.push(accepted() - before);

        let before = accepted();
        let roots_hyper = roots.clone();
        hyper.0.push(net.block_on_client(async move {
            let http = HttpConnector::new_with_resolver(LookupIp(hickory()));
            let client =
                Client::builder(TokioExecutor::new()).build(HyperTls::new(http, roots_hyper));
            burst_hyper(client, url).await
        }));
        hyper.1.push(accepted() - before);
    }
    concurrent_rows("blackhole", rounds, ours, hyper)
}
