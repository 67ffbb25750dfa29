//! The warm request path's contenders, shared by the `pool` bench (requests per second and
//! latency) and the `requests` bench (allocations and instructions per request): a loopback
//! HTTP server over TLS, our `Pool`, hyper-util's legacy `Client` (hyper-rustls, HTTP/1 and
//! HTTP/2 on, as its users set it up) and reqwest, all with the same rustls configuration
//! (aws-lc-rs, the test CA, ALPN `h2` then `http/1.1`); the server's ALPN picks the protocol.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use fastfallback_http::{Origin, Pool};
use fastfallback_net::{Connectivity, Connector, StaticResolver};
use fastfallback_testnet::TlsMaterial;
use fastfallback_testnet::http::{HttpOptions, HttpStats, serve};
use futures::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

type HyperClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// The test CA as the only trusted root.
pub fn roots(tls: &TlsMaterial) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.ca_der()).expect("CA");
    roots
}

/// Our connector for loopback origins: both families, a resolver for literals only, the
/// test CA.
pub fn loopback_connector(tls: &TlsMaterial) -> Connector {
    Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(StaticResolver::new())
        .root_certificates(roots(tls))
        .build()
        .expect("connector")
}

/// A loopback HTTP server over TLS offering `alpn`, its tasks spawned on the current
/// runtime: its port and its counters.
pub async fn server(tls: &TlsMaterial, alpn: &[u8]) -> (u16, Arc<HttpStats>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    (port, serve(listener, server_options(tls, alpn)))
}

/// A loopback HTTP server over TLS offering `alpn`, alone on a thread of its own with a
/// current-thread runtime; stopped and joined on drop.
///
/// A client benchmark must not be limited by its server. On a multi-thread runtime a task
/// that another task wakes runs next (tokio's LIFO slot), so each stream task's response
/// wakes the connection task at once and every response goes out in a write of its own
/// (`strace`: one `writev` per response at 64 in flight, the server thread at 99 % of a
/// core). A current-thread runtime runs woken tasks in turn, so the responses ready together
/// leave in one write, as a server under load would send them.
pub struct ServerThread {
    port: u16,
    stats: Arc<HttpStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Starts the server; returns once it listens.
    pub fn start(tls: &TlsMaterial, alpn: &[u8]) -> Self {
        let options = server_options(tls, alpn);
        let (ready, listening) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("server runtime");
                rt.block_on(async move {
                    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                    let port = listener.local_addr().expect("addr").port();
                    ready
                        .send((port, serve(listener, options)))
                        .expect("bench waits");
                    let _ = stopped.await;
                });
            })
            .expect("server thread");
        let (port, stats) = listening.recv().expect("server listens");
        Self {
            port,
            stats,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its counters.
    pub fn stats(&self) -> &Arc<HttpStats> {
        &self.stats
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The server's options: TLS offering `alpn` only, HTTP/2 only over TLS, no stream limit.
fn server_options(tls: &TlsMaterial, alpn: &[u8]) -> HttpOptions {
    HttpOptions {
        tls: Some(tls.with_alpn(&[alpn.to_vec()])),
        cleartext_h2: false,
        max_streams: None,
        ..HttpOptions::default()
    }
}

/// One call's whole exchange through our pool: GET / and the body read to its end.
pub async fn call(pool: &Pool, origin: &Origin) {
    let exchange = pool.exchange(origin).await.expect("exchange");
    let request = http::Request::get("/").body(Bytes::new()).expect("request");
    let body = exchange.send(request).await.expect("response").into_body();
    assert_eq!(body.bytes().await.expect("body").as_ref(), b"ok");
}

/// The contenders of a warm row, in [`crate::williams_row`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// Our `Pool`.
    Ours,
    /// hyper-util's legacy `Client` with hyper-rustls.
    Hyper,
    /// reqwest.
    Reqwest,
}

impl Who {
    /// Every contender.
    pub const ALL: [Self; 3] = [Self::Ours, Self::Hyper, Self::Reqwest];

    /// The contender's name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ours => "fastfallback Pool",
            Self::Hyper => "hyper-util legacy Client (hyper-rustls)",
            Self::Reqwest => "reqwest",
        }
    }

    /// The contender named `name` (`ours`, `hyper`, `reqwest`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    /// A short name, for command lines.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ours => "ours",
            Self::Hyper => "hyper",
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

/// The three clients of a warm row, aimed at one loopback server.
pub struct Clients {
    pool: Pool,
    origin: Origin,
    hyper: HyperClient,
    reqwest: reqwest::Client,
    uri: http::Uri,
    url: String,
}

impl Clients {
    /// Clients for the server on loopback `port`; call inside the runtime that runs them.
    pub fn new(tls: &TlsMaterial, port: u16) -> Self {
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
    pub async fn request(&self, who: Who) -> f64 {
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
    pub async fn round(&self, who: Who, n: usize, in_flight: usize) -> (f64, Vec<f64>) {
        let t = Instant::now();
        let latencies: Vec<f64> = futures::stream::iter(0..n)
            .map(|_| self.request(who))
            .buffer_unordered(in_flight)
            .collect()
            .await;
        (n as f64 / t.elapsed().as_secs_f64(), latencies)
    }
}

/// The `p` quantile of `v` (nearest rank; NaN when empty).
pub fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i]
}
