//! The request path on a warm pool (issue 24's first rows): requests per second and per-request
//! latency (p50, p99) through our `Pool`, hyper-util's legacy `Client` (hyper-rustls, HTTP/1
//! and HTTP/2 on, as its users set it up) and reqwest (rustls with the same configuration),
//! over loopback TLS, HTTP/2 and HTTP/1.1 keep-alive, with 1, 64 and 256 requests in flight.
//!
//! Every contender gets the same rustls configuration (aws-lc-rs, the test CA, ALPN `h2` then
//! `http/1.1`); the server's ALPN picks the protocol. Before measuring, each client makes one
//! round of requests at the measured concurrency, so its pool holds the connections that
//! concurrency needs (one for HTTP/2, up to one per request in flight for HTTP/1). Rounds
//! take turns between the contenders; the figures are medians over the rounds (rates) and
//! over every request (latencies).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use fastfallback_benches::{median, williams_row};
use fastfallback_http::{Origin, Pool};
use fastfallback_testnet::TlsMaterial;
use futures::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::{Row, call, loopback_connector, roots, server};

type HyperClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// The contenders of a row, in [`williams_row`] order.
#[derive(Clone, Copy)]
enum Who {
    Ours,
    Hyper,
    Reqwest,
}

impl Who {
    const ALL: [Self; 3] = [Self::Ours, Self::Hyper, Self::Reqwest];

    fn label(self) -> &'static str {
        match self {
            Self::Ours => "fastfallback Pool",
            Self::Hyper => "hyper-util legacy Client (hyper-rustls)",
            Self::Reqwest => "reqwest",
        }
    }
}

/// The rustls configuration every contender uses; hyper-rustls sets the ALPN ids itself
/// (the same two, from `enable_http2` and `enable_http1`), the others get them here.
fn client_config(tls: &TlsMaterial, alpn: bool) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots(tls))
        .with_no_client_auth();
    if alpn {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    }
    config
}

struct Clients {
    pool: Pool,
    origin: Origin,
    hyper: HyperClient,
    reqwest: reqwest::Client,
    uri: http::Uri,
    url: String,
}

impl Clients {
    fn new(tls: &TlsMaterial, port: u16) -> Self {
        let url = format!("https://127.0.0.1:{port}/");
        let pool = Pool::new(loopback_connector(tls));
        let origin = pool.origin(&url).expect("origin");
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client_config(tls, false))
            .https_only()
            .enable_http1()
            .enable_http2()
            .build();
        let hyper = Client::builder(TokioExecutor::new()).build(https);
        let reqwest = reqwest::Client::builder()
            .use_preconfigured_tls(client_config(tls, true))
            .build()
            .expect("reqwest client");
        Self {
            pool,
            origin,
            hyper,
            reqwest,
            uri: url.parse().expect("uri"),
            url,
        }
    }

    /// One request, its body read to the end; its latency in µs.
    async fn request(&self, who: Who) -> f64 {
        let t = Instant::now();
        match who {
            Who::Ours => call(&self.pool, &self.origin).await,
            Who::Hyper => {
                let response = self.hyper.get(self.uri.clone()).await.expect("hyper-util");
                let body = response.into_body().collect().await.expect("body");
                assert_eq!(body.to_bytes().as_ref(), b"ok");
            }
            Who::Reqwest => {
                let response = self.reqwest.get(&self.url).send().await.expect("reqwest");
                assert_eq!(response.bytes().await.expect("body").as_ref(), b"ok");
            }
        }
        t.elapsed().as_secs_f64() * 1e6
    }

    /// `n` requests with `in_flight` at a time: (requests per second, each one's latency).
    async fn round(&self, who: Who, n: usize, in_flight: usize) -> (f64, Vec<f64>) {
        let t = Instant::now();
        let latencies: Vec<f64> = futures::stream::iter(0..n)
            .map(|_| self.request(who))
            .buffer_unordered(in_flight)
            .collect()
            .await;
        (n as f64 / t.elapsed().as_secs_f64(), latencies)
    }
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i]
}

/// The warm rows: HTTP/2 and HTTP/1.1, each at 1, 64 and 256 requests in flight.
pub(super) fn rows(rt: &tokio::runtime::Runtime, tls: &TlsMaterial, full: bool) -> Vec<Row> {
    let rounds = if full { 12 } else { 2 };
    let mut rows = Vec::new();
    for (alpn, proto) in [(&b"h2"[..], "h2"), (&b"http/1.1"[..], "http/1.1")] {
        rt.block_on(async {
            let (port, stats) = server(tls, alpn).await;
            let clients = Clients::new(tls, port);
            for in_flight in [1, 64, 256] {
                let n = if full { (in_flight * 8).max(400) } else { in_flight.max(8) };
                // Warm: every client's pool gets the connections this concurrency needs.
                for who in Who::ALL {
                    clients.round(who, in_flight, in_flight).await;
                }
                let mut rates = vec![Vec::new(); Who::ALL.len()];
                let mut latencies = vec![Vec::new(); Who::ALL.len()];
                // Connections each client opened while measured: a warm pool opens none.
                let mut opened = [0usize; Who::ALL.len()];
                for k in 0..rounds {
                    for i in williams_row(Who::ALL.len(), k) {
                        let before = stats.connections();
                        let (rate, l) = clients.round(Who::ALL[i], n, in_flight).await;
                        opened[i] += stats.connections() - before;
                        rates[i].push(rate);
                        latencies[i].extend(l);
                    }
                }
                let ours_rate = median(rates[0].clone());
                for (i, who) in Who::ALL.into_iter().enumerate() {
                    let rate = median(rates[i].clone());
                    let (p50, p99) = (
                        percentile(latencies[i].clone(), 0.5),
                        percentile(latencies[i].clone(), 0.99),
                    );
                    eprintln!(
                        "warm {proto} ×{in_flight}: {:<42} {rate:>9.0} req/s  p50 {p50:>7.0} µs  p99 {p99:>7.0} µs  opened {}  (ours ÷ it: {:.2})",
                        who.label(),
                        opened[i],
                        ours_rate / rate
                    );
                    rows.push(Row {
                        section: "warm",
                        contender: who.label(),
                        value: rate,
                        unit: "req/s",
                        connections: Some(opened[i] as f64),
                        rounds,
                        detail: Some(format!(
                            "{proto}, {in_flight} in flight, {n} requests a round; p50 {p50:.0} µs, p99 {p99:.0} µs; ours ÷ it {:.2}",
                            ours_rate / rate
                        )),
                    });
                }
            }
        });
    }
    rows
}
