//! The pool against real servers on loopback: hyper's HTTP/1.1 server and the h2 crate's
//! HTTP/2 server, over TLS with ALPN (and cleartext prior-knowledge h2). No root needed.
//!
//! Names are pinned with a [`StaticResolver`]; certificates come from a CA made at run time.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fastfallback_http::{Call, ExchangeError, Pool, PoolOptions, RequestBody};
use fastfallback_net::{
    CallEvent, ConnectionEvent, ConnectionListener, Connectivity, Connector, EventListener,
    FallbackPolicy, Source, StaticResolver,
};
use fastfallback_plan::{PoolPolicy, SpareWinners};
use fastfallback_proto::Protocol;
use fastfallback_testkit::loopback::{accept_and_hold, bind, closed_port, serve_each};
use fastfallback_testnet::TlsMaterial;
use fastfallback_testnet::http::{HttpOptions, HttpStats, serve};
use futures::StreamExt;
use rustls::RootCertStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const V4: &str = "127.0.0.1";
const V6: &str = "::1";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const H2: &[u8] = b"h2";
const H1: &[u8] = b"http/1.1";

/// A test origin: servers on one port of the given loopback addresses, a CA and a
/// connector that trusts it, with `names` resolving to `resolves` (per name).
struct Setup {
    port: u16,
    tls: TlsMaterial,
    resolver: StaticResolver,
}

impl Setup {
    /// A CA whose leaf covers `cert_names`.
    fn new(cert_names: &[&str]) -> Self {
        let names: Vec<String> = cert_names.iter().map(|s| (*s).to_owned()).collect();
        Self {
            port: 0,
            tls: TlsMaterial::new(&names, &[]).unwrap(),
            resolver: StaticResolver::new(),
        }
    }

    fn resolve(mut self, name: &str, to: &[&str]) -> Self {
        self.resolver = self.resolver.with(name, to.iter().map(|s| ip(s)));
        self
    }

    /// Listens on one free port of each of `on`, serving HTTP over TLS with `alpn`.
    async fn serve(
        &mut self,
        on: &[&str],
        alpn: &[&[u8]],
        max_streams: Option<u32>,
    ) -> Vec<Arc<HttpStats>> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|a| a.to_vec()).collect();
        let listeners = listen(on).await;
        self.port = listeners[0].local_addr().unwrap().port();
        listeners
            .into_iter()
            .map(|l| {
                serve(
                    l,
                    HttpOptions {
                        tls: Some(self.tls.with_alpn(&alpn)),
                        cleartext_h2: false,
                        max_streams,
                        ..HttpOptions::default()
                    },
                )
            })
            .collect()
    }

    /// Listens on one free port of 127.0.0.1, serving HTTP/2 over TLS with `options` (its
    /// `tls` is set here).
    async fn serve_h2_with(&mut self, options: HttpOptions) -> Arc<HttpStats> {
        let listener = listen(&[V4]).await.remove(0);
        self.port = listener.local_addr().unwrap().port();
        let tls = Some(self.tls.with_alpn(&[H2.to_vec()]));
        serve(listener, HttpOptions { tls, ..options })
    }

    fn connector(&self, policy: FallbackPolicy) -> Connector {
        let mut roots = RootCertStore::empty();
        roots.add(self.tls.ca_der()).unwrap();
        Connector::builder()
            .connectivity(Connectivity::DUAL_STACK)
            .resolver(self.resolver.clone())
            .root_certificates(roots)
            .policy(policy)
            .rng_seed(0)
            .build()
            .unwrap()
    }

    fn pool(&self) -> Pool {
        Pool::new(self.connector(FallbackPolicy::default()))
    }

    fn url(&self, host: &str) -> String {
        format!("https://{host}:{}", self.port)
    }
}

/// Listeners on one port free on every address of `on`.
async fn listen(on: &[&str]) -> Vec<TcpListener> {
    let open: Vec<IpAddr> = on.iter().map(|h| ip(h)).collect();
    fastfallback_testkit::loopback::listen_on_one_port(&open, &[])
        .await
        .1
}

fn get(path: &str) -> http::Request<Bytes> {
    http::Request::get(path).body(Bytes::new()).unwrap()
}

/// Sends `GET path` on a new exchange and reads the whole response: (status, x-conn, body,
/// source).
async fn fetch(pool: &Pool, url: &str, path: &str) -> (u16, String, Bytes, Source) {
    let origin = pool.origin(url).unwrap();
    let exchange = pool.exchange(&origin).await.unwrap();
    let source = exchange.source();
    let response = exchange.send(get(path)).await.unwrap();
    let status = response.status().as_u16();
    let conn = response.headers()["x-conn"].to_str().unwrap().to_owned();
    let body = response.into_body().bytes().await.unwrap();
    (status, conn, body, source)
}

#[tokio::test]
async fn http1_connection_is_reused_after_the_response_is_read() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H1], None).await;
    let pool = setup.pool();
    let url = setup.url("a.test");

    let first = fetch(&pool, &url, "/").await;
    let second = fetch(&pool, &url, "/").await;

    assert_eq!(
        (first.0, first.2.as_ref(), first.3),
        (200, &b"ok"[..], Source::New)
    );
    assert_eq!(second.3, Source::Pool);
    assert_eq!(first.1, second.1, "same server connection");
    assert_eq!(stats[0].connections(), 1);
    assert_eq!(pool.stats().connections, 1);
    assert_eq!(pool.stats().idle, 1);
}

#[tokio::test]
async fn http1_body_dropped_before_its_end_closes_the_connection() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H1], None).await;
    let pool = setup.pool();
    let origin = pool.origin(&setup.url("a.test")).unwrap();

    let exchange = pool.exchange(&origin).await.unwrap();
    let response = exchange.send(get("/bytes/1000000")).await.unwrap();
    drop(response);
    assert_eq!(pool.stats().connections, 0, "closed, not pooled");

    let (_, _, _, source) = fetch(&pool, &setup.url("a.test"), "/").await;
    assert_eq!(source, Source::New);
    assert_eq!(stats[0].connections(), 2);
}

#[tokio::test]
async fn http1_connection_close_response_is_not_reused() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H1], None).await;
    let pool = setup.pool();
    let url = setup.url("a.test");

    let first = fetch(&pool, &url, "/close").await;
    let second = fetch(&pool, &url, "/").await;

    assert_eq!(first.3, Source::New);
    assert_eq!(second.3, Source::New);
    assert_ne!(first.1, second.1);
    assert_eq!(stats[0].connections(), 2);
}

/// A raw HTTP/1.1 server: answers one request, then writes stray bytes on the idle
/// connection. A pool must not hand that connection out again.
#[tokio::test]
async fn idle_http1_connection_with_stray_bytes_is_not_reused() {
    let listener = listen(&[V4]).await.remove(0);
    let port = listener.local_addr().unwrap().port();
    let accepted = serve_each(listener, |mut s| async move {
        let mut buf = [0u8; 4096];
        let mut seen = Vec::new();
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = s.write_all(b"stray bytes").await;
        let _ = s.read(&mut buf).await;
    });
    let resolver = StaticResolver::new().with("raw.test", [ip(V4)]);
    let connector = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(resolver)
        .build()
        .unwrap();
    let pool = Pool::new(connector);
    let url = format!("http://raw.test:{port}");

    let first = fetch_plain(&pool, &url).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = fetch_plain(&pool, &url).await;

    assert_eq!(first, (200, Source::New));
    assert_eq!(
        second,
        (200, Source::New),
        "the unhealthy idle connection was skipped"
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

async fn fetch_plain(pool: &Pool, url: &str) -> (u16, Source) {
    let origin = pool.origin(url).unwrap();
    let exchange = pool.exchange(&origin).await.unwrap();
    let source = exchange.source();
    let response = exchange.send(get("/")).await.unwrap();
    let status = response.status().as_u16();
    response.into_body().bytes().await.unwrap();
    (status, source)
}

#[tokio::test]
async fn hundred_concurrent_calls_to_a_new_h2_origin_open_one_connection() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2, H1], None).await;
    let pool = setup.pool();
    let url = setup.url("a.test");

    let calls = (0..100).map(|_| {
        let (pool, url) = (pool.clone(), url.clone());
        tokio::spawn(async move { fetch(&pool, &url, "/").await })
    });
    let results = futures::future::join_all(calls).await;

    let mut sources = std::collections::BTreeMap::new();
    for r in results {
        let (status, conn, body, source) = r.unwrap();
        assert_eq!(
            (status, conn.as_str(), body.as_ref()),
            (200, "1", &b"ok"[..])
        );
        *sources.entry(format!("{source:?}")).or_insert(0) += 1;
    }
    assert_eq!(stats[0].connections(), 1, "exactly one TCP+TLS connection");
    assert_eq!(sources.get("New"), Some(&1));
    assert_eq!(sources.values().sum::<i32>(), 100);
    assert_eq!(pool.stats().connections, 1);
    assert_eq!((pool.stats().watching, pool.stats().flights), (0, 0));
}

#[tokio::test]
async fn h2_stream_limit_follows_the_peers_settings() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], Some(2)).await;
    let pool = setup.pool();
    let url = setup.url("a.test");
    fetch(&pool, &url, "/").await;
    // The SETTINGS frame is read with the answer to the pool's first PING.
    tokio::time::sleep(Duration::from_millis(50)).await;

    let calls = (0..3).map(|_| {
        let (pool, url) = (pool.clone(), url.clone());
        tokio::spawn(async move { fetch(&pool, &url, "/sleep/200").await })
    });
    let results = futures::future::join_all(calls).await;

    let conns: std::collections::BTreeSet<String> =
        results.into_iter().map(|r| r.unwrap().1).collect();
    assert_eq!(
        conns.len(),
        2,
        "two streams fit on the first connection, the third needs a second"
    );
    assert_eq!(stats[0].connections(), 2);
}

#[tokio::test]
async fn exclusive_exchange_is_never_pooled() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], None).await;
    let pool = setup.pool();
    let origin = pool.origin(&setup.url("a.test")).unwrap();

    let exclusive = pool.exchange_exclusive(&origin).await.unwrap();
    assert_eq!(
        (exclusive.source(), exclusive.pooled_id()),
        (Source::New, None)
    );
    assert_eq!(pool.stats().connections, 0);
    let body = exclusive
        .send(get("/"))
        .await
        .unwrap()
        .into_body()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.as_ref(), b"ok");

    let (_, _, _, source) = fetch(&pool, &setup.url("a.test"), "/").await;
    assert_eq!(
        source,
        Source::New,
        "the exclusive connection was not offered"
    );
    assert_eq!(stats[0].connections(), 2);
    // The exclusive connection is closed once its exchange ended.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(stats[0].open(), 1);
}

#[tokio::test]
async fn idle_monitor_closes_expired_connections_without_a_call() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H1], None).await;
    let policy = FallbackPolicy::builder()
        .pool(PoolPolicy {
            keep_alive: Duration::from_millis(100),
            ..PoolPolicy::default()
        })
        .build()
        .unwrap();
    let pool = Pool::new(setup.connector(policy));
    fetch(&pool, &setup.url("a.test"), "/").await;
    assert_eq!(pool.stats().idle, 1);

    tokio::time::sleep(Duration::from_millis(300)).await;

    assert_eq!(pool.stats().connections, 0);
    assert_eq!(stats[0].open(), 0, "the server saw the connection close");
}

#[tokio::test]
async fn evict_all_closes_idle_connections() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], None).await;
    let pool = setup.pool();
    fetch(&pool, &setup.url("a.test"), "/").await;
    assert_eq!(stats[0].open(), 1);

    pool.evict_all();

    assert_eq!(pool.stats().connections, 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(stats[0].open(), 0);
}

#[tokio::test]
async fn h2_connection_is_coalesced_for_a_host_its_certificate_covers() {
    let mut setup = Setup::new(&["a.test", "b.test"])
        .resolve("a.test", &[V4])
        .resolve("b.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], None).await;
    let pool = setup.pool();

    let a = fetch(&pool, &setup.url("a.test"), "/").await;
    let origin_b = pool.origin(&setup.url("b.test")).unwrap();
    let b = pool.exchange(&origin_b).await.unwrap();
    assert_eq!(b.source(), Source::Coalesced);
    let response = b.send(get("/")).await.unwrap();
    let host = response.headers()["x-host"].to_str().unwrap().to_owned();

    assert_eq!(a.3, Source::New);
    assert_eq!(
        host,
        format!("b.test:{}", setup.port),
        "sent with b's authority"
    );
    assert_eq!(stats[0].connections(), 1);
}

#[tokio::test]
async fn certificate_not_covering_the_host_is_never_coalesced() {
    // The leaf covers a.test only; b.test resolves to the same address and port.
    let mut setup = Setup::new(&["a.test"])
        .resolve("a.test", &[V4])
        .resolve("b.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], None).await;
    let pool = setup.pool();
    fetch(&pool, &setup.url("a.test"), "/").await;

    let origin_b = pool.origin(&setup.url("b.test")).unwrap();
    let b = pool.exchange(&origin_b).await;

    // b ran its own race, and its own handshake rejected the certificate.
    match b {
        Err(ExchangeError::Connect(e)) => {
            let text = e.to_string();
            assert!(text.contains("certificate"), "{text}");
        }
        other => panic!("expected b's own connect to fail on the certificate: {other:?}"),
    }
    assert_eq!(stats[0].connections(), 2);
}

#[tokio::test]
async fn address_the_host_did_not_resolve_to_is_never_coalesced() {
    // The certificate covers both names, but b.test resolves only to ::1 while a's
    // connection goes to 127.0.0.1.
    let mut setup = Setup::new(&["a.test", "b.test"])
        .resolve("a.test", &[V4])
        .resolve("b.test", &[V6]);
    let stats = setup.serve(&[V4, V6], &[H2], None).await;
    let pool = setup.pool();
    fetch(&pool, &setup.url("a.test"), "/").await;

    let b = fetch(&pool, &setup.url("b.test"), "/").await;

    assert_eq!(b.3, Source::New);
    assert_eq!((stats[0].connections(), stats[1].connections()), (1, 1));
}

/// One h2 server on 127.0.0.1 whose certificate covers a.test and b.test (both resolving
/// there), and a pool that made one call to a.test: b.test may now be coalesced onto it.
async fn coalescable_after_a_call_to_a() -> (Setup, Vec<Arc<HttpStats>>, Pool) {
    let mut setup = Setup::new(&["a.test", "b.test"])
        .resolve("a.test", &[V4])
        .resolve("b.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], None).await;
    let pool = setup.pool();
    fetch(&pool, &setup.url("a.test"), "/").await;
    (setup, stats, pool)
}

#[tokio::test]
async fn misdirected_request_stops_coalescing_that_host() {
    let (setup, stats, pool) = coalescable_after_a_call_to_a().await;

    // The test server answers 421 on that path whatever the connection.
    let refused = fetch(&pool, &setup.url("b.test"), "/status/421").await;
    let after = fetch(&pool, &setup.url("b.test"), "/").await;

    assert_eq!((refused.0, refused.3), (421, Source::Coalesced));
    assert_eq!(refused.1, "2", "sent once more, on a connection of b's own");
    assert_eq!(
        (after.1.as_str(), after.3),
        ("2", Source::Pool),
        "b keeps its own"
    );
    assert_eq!(stats[0].connections(), 2);
    assert_eq!(stats[0].requests(), 1 + 2 + 1);
}

/// A 421 answered over a coalesced connection is sent once more on the host's own
/// connection (RFC 9110 §15.5.20; OkHttp retries it too), and the caller gets that answer.
#[tokio::test]
async fn misdirected_request_on_a_coalesced_connection_is_answered_on_the_hosts_own() {
    let (setup, stats, pool) = coalescable_after_a_call_to_a().await;
    // `/status/421` only on connection 1 (the coalesced one): a server whose connection 1
    // is not authoritative for b.test.
    let origin = pool.origin(&setup.url("b.test")).unwrap();
    let exchange = pool.exchange(&origin).await.unwrap();
    assert_eq!(exchange.source(), Source::Coalesced);
    let request = http::Request::get("/status-on-1/421")
        .body(Bytes::new())
        .unwrap();
    let response = exchange.send(request).await.unwrap();

    assert_eq!(
        response.status().as_u16(),
        200,
        "answered on b's own connection"
    );
    assert_eq!(response.headers()["x-conn"], "2");
    assert_eq!(stats[0].connections(), 2);
}

#[tokio::test]
async fn prior_knowledge_h2_on_cleartext() {
    let listener = listen(&[V4]).await.remove(0);
    let port = listener.local_addr().unwrap().port();
    let stats = serve(
        listener,
        HttpOptions {
            tls: None,
            cleartext_h2: true,
            max_streams: None,
            ..HttpOptions::default()
        },
    );
    let connector = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(StaticResolver::new().with("plain.test", [ip(V4)]))
        .build()
        .unwrap();
    let options = PoolOptions {
        prior_knowledge_h2: true,
        ..PoolOptions::default()
    };
    let pool = Pool::with_options(connector, options);
    let origin = pool.origin(&format!("http://plain.test:{port}")).unwrap();

    let first = pool.exchange(&origin).await.unwrap();
    assert_eq!(first.protocol(), Protocol::Http2);
    let second = pool.exchange(&origin).await.unwrap();

    assert_eq!(
        second.source(),
        Source::Pool,
        "an h2 connection carries both at once"
    );
    let r1 = first.send(get("/")).await.unwrap();
    let r2 = second.send(get("/")).await.unwrap();
    assert_eq!((r1.status().as_u16(), r2.status().as_u16()), (200, 200));
    assert_eq!(stats.connections(), 1);
}

#[tokio::test]
async fn http1_waiters_race_at_once_when_the_first_connect_speaks_http1() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H1], None).await;
    let pool = setup.pool();
    let url = setup.url("a.test");

    let calls = (0..5).map(|_| {
        let (pool, url) = (pool.clone(), url.clone());
        tokio::spawn(async move { fetch(&pool, &url, "/sleep/100").await })
    });
    let results = futures::future::join_all(calls).await;

    for r in results {
        assert_eq!(r.unwrap().0, 200);
    }
    assert_eq!(
        stats[0].connections(),
        5,
        "HTTP/1 carries one exchange at a time"
    );
    assert_eq!(pool.stats().connections, 5);
    assert_eq!((pool.stats().watching, pool.stats().flights), (0, 0));
}

#[tokio::test]
async fn dropped_waiting_call_leaves_nothing_registered() {
    // A server that accepts and never answers the TLS handshake: the leader hangs.
    let listener = listen(&[V4]).await.remove(0);
    let port = listener.local_addr().unwrap().port();
    accept_and_hold(listener);
    let setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let pool = setup.pool();
    let origin = pool.origin(&format!("https://a.test:{port}")).unwrap();

    let leader = tokio::spawn({
        let (pool, origin) = (pool.clone(), origin.clone());
        async move { pool.exchange(&origin).await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let follower = tokio::spawn({
        let (pool, origin) = (pool.clone(), origin.clone());
        async move { pool.exchange(&origin).await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!((pool.stats().watching, pool.stats().flights), (2, 1));

    follower.abort();
    let _ = follower.await;
    assert_eq!((pool.stats().watching, pool.stats().flights), (1, 1));
    leader.abort();
    let _ = leader.await;
    assert_eq!((pool.stats().watching, pool.stats().flights), (0, 0));
}

#[tokio::test]
async fn exchange_dropped_unused_gives_its_http1_connection_back() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H1], None).await;
    let pool = setup.pool();
    let origin = pool.origin(&setup.url("a.test")).unwrap();

    let unused = pool.exchange(&origin).await.unwrap();
    assert_eq!(pool.stats().idle, 0);
    drop(unused);
    assert_eq!(pool.stats().idle, 1);

    let (status, _, _, source) = fetch(&pool, &setup.url("a.test"), "/").await;
    assert_eq!((status, source), (200, Source::Pool));
    assert_eq!(stats[0].connections(), 1);
}

/// Records events as short strings, in order.
#[derive(Clone, Default)]
struct Recorder(Arc<std::sync::Mutex<Vec<String>>>);

impl Recorder {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl EventListener for Recorder {
    fn event(&self, event: &CallEvent) {
        let line = match event {
            CallEvent::CallStart { .. } => "CallStart".to_owned(),
            CallEvent::DnsStart { query } => format!("DnsStart {query}"),
            CallEvent::DnsEnd { query, .. } => format!("DnsEnd {query}"),
            CallEvent::ConnectStart { attempt, .. } => format!("ConnectStart #{attempt}"),
            CallEvent::SecureConnectStart { attempt } => format!("SecureConnectStart #{attempt}"),
            CallEvent::SecureConnectEnd { attempt, alpn } => {
                format!(
                    "SecureConnectEnd #{attempt} {}",
                    alpn.as_deref().unwrap_or("-")
                )
            }
            CallEvent::ConnectEnd { attempt, .. } => format!("ConnectEnd #{attempt}"),
            CallEvent::ConnectFailed { attempt, error, .. } => {
                format!(
                    "ConnectFailed #{attempt} {}",
                    error.split(':').next().unwrap_or("")
                )
            }
            CallEvent::ConnectionAcquired { source, .. } => {
                format!("ConnectionAcquired {source:?}")
            }
            CallEvent::ConnectionReleased { .. } => "ConnectionReleased".to_owned(),
            CallEvent::CallEnd => "CallEnd".to_owned(),
            CallEvent::CallFailed { .. } => "CallFailed".to_owned(),
            other => format!("{other:?}"),
        };
        self.0.lock().unwrap().push(line);
    }
}

impl ConnectionListener for Recorder {
    fn event(&self, event: &ConnectionEvent) {
        let line = match event {
            ConnectionEvent::ConnectStart { attempt, .. } => format!("ConnectStart #{attempt}"),
            ConnectionEvent::ConnectEnd { attempt, .. } => format!("ConnectEnd #{attempt}"),
            ConnectionEvent::ConnectFailed { attempt, .. } => format!("ConnectFailed #{attempt}"),
            ConnectionEvent::Acquired { connection } => format!("Acquired {connection}"),
            ConnectionEvent::Released { connection } => format!("Released {connection}"),
            ConnectionEvent::NoNewExchanges { connection } => {
                format!("NoNewExchanges {connection}")
            }
            ConnectionEvent::Closed { connection } => format!("Closed {connection}"),
            other => format!("{other:?}"),
        };
        self.0.lock().unwrap().push(line);
    }
}

/// One call with a recording listener; returns its events.
async fn observed_fetch(pool: &Pool, url: &str, path: &str) -> Vec<String> {
    let calls = Recorder::default();
    let origin = pool.origin(url).unwrap();
    let exchange = pool
        .exchange_with(&origin, Call::default().listener(calls.clone()))
        .await
        .unwrap();
    let response = exchange.send(get(path)).await.unwrap();
    response.into_body().bytes().await.unwrap();
    calls.take()
}

#[tokio::test]
async fn call_events_follow_okhttps_order_for_a_new_then_a_pooled_connection() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    setup.serve(&[V4], &[H2], None).await;
    let pool = setup.pool();
    let url = setup.url("a.test");

    let first = observed_fetch(&pool, &url, "/").await;
    let second = observed_fetch(&pool, &url, "/").await;

    assert_eq!(
        first,
        [
            "CallStart",
            // HEv3 §4: the HTTPS query goes first, then AAAA and A.
            "DnsStart HTTPS",
            "DnsStart AAAA",
            "DnsStart A",
            "DnsEnd HTTPS",
            "DnsEnd AAAA",
            "DnsEnd A",
            "ConnectStart #1",
            "SecureConnectStart #1",
            "SecureConnectEnd #1 h2",
            "ConnectEnd #1",
            "ConnectionAcquired New",
            "ConnectionReleased",
            "CallEnd",
        ]
    );
    assert_eq!(
        second,
        [
            "CallStart",
            "ConnectionAcquired Pool",
            "ConnectionReleased",
            "CallEnd"
        ]
    );
}

/// A pool whose connector trusts `tls`'s CA and finds `a.test` at `::1` then `127.0.0.1`,
/// with a 50 ms attempt delay on top of `policy`.
fn dual_stack_pool(tls: &TlsMaterial, policy: fastfallback_plan::FallbackPolicyBuilder) -> Pool {
    Pool::new(dual_stack_connector(tls, policy).build().unwrap())
}

/// A connector for `a.test` on ::1 and 127.0.0.1 that trusts `tls`'s CA, with a 50 ms
/// attempt delay on top of `policy`.
fn dual_stack_connector(
    tls: &TlsMaterial,
    policy: fastfallback_plan::FallbackPolicyBuilder,
) -> fastfallback_net::ConnectorBuilder {
    let mut roots = RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    let policy = policy
        .attempt_delay(Duration::from_millis(50))
        .build()
        .unwrap();
    Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(StaticResolver::new().with("a.test", [ip(V6), ip(V4)]))
        .root_certificates(roots)
        .policy(policy)
        .rng_seed(0)
}

#[tokio::test]
async fn losing_attempt_is_reported_failed_when_the_winner_connects() {
    // ::1 accepts TCP and never answers TLS; 127.0.0.1 speaks TLS. The IPv6 attempt starts
    // first and is cancelled when the IPv4 one wins.
    let stall = TcpListener::bind("[::1]:0").await.unwrap();
    let port = stall.local_addr().unwrap().port();
    accept_and_hold(stall);
    let tls = TlsMaterial::new(&["a.test".to_owned()], &[]).unwrap();
    let v4 = TcpListener::bind((ip(V4), port)).await.unwrap();
    serve(
        v4,
        HttpOptions {
            tls: Some(tls.with_alpn(&[H2.to_vec()])),
            cleartext_h2: false,
            max_streams: None,
            ..HttpOptions::default()
        },
    );
    let pool = dual_stack_pool(&tls, FallbackPolicy::builder());

    let events = observed_fetch(&pool, &format!("https://a.test:{port}"), "/").await;

    let attempts: Vec<&String> = events
        .iter()
        .filter(|e| {
            (e.starts_with("Connect") || e.starts_with("Secure")) && *e != "ConnectionReleased"
        })
        .collect();
    assert_eq!(
        attempts,
        [
            "ConnectStart #1",
            "SecureConnectStart #1",
            "ConnectStart #2",
            "SecureConnectStart #2",
            "SecureConnectEnd #2 h2",
            "ConnectEnd #2",
            "ConnectFailed #1 cancelled",
            "ConnectionAcquired New",
        ]
    );
}

#[tokio::test]
async fn connection_events_for_new_reused_and_broken_connections() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    setup.serve(&[V4], &[H1], None).await;
    let conns = Recorder::default();
    let pool = Pool::with_listener(
        setup.connector(FallbackPolicy::default()),
        PoolOptions::default(),
        conns.clone(),
    );
    let url = setup.url("a.test");

    fetch(&pool, &url, "/").await;
    assert_eq!(
        conns.take(),
        [
            "ConnectStart #1",
            "ConnectEnd #1",
            "Acquired 1",
            "Released 1"
        ]
    );

    fetch(&pool, &url, "/").await;
    assert_eq!(conns.take(), ["Acquired 1", "Released 1"]);

    // A body dropped before its end breaks an HTTP/1 connection.
    let origin = pool.origin(&url).unwrap();
    let response = pool
        .exchange(&origin)
        .await
        .unwrap()
        .send(get("/bytes/1000000"))
        .await
        .unwrap();
    drop(response);
    assert_eq!(
        conns.take(),
        ["Acquired 1", "NoNewExchanges 1", "Released 1", "Closed 1"]
    );
}

#[tokio::test]
async fn failed_call_ends_with_call_failed() {
    // Nothing listens on the port: the race fails.
    let port = closed_port();
    let setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let pool = setup.pool();
    let origin = pool.origin(&format!("https://a.test:{port}")).unwrap();
    let calls = Recorder::default();

    let result = pool
        .exchange_with(&origin, Call::default().listener(calls.clone()))
        .await;

    assert!(result.is_err());
    let events = calls.take();
    assert_eq!(events.first().map(String::as_str), Some("CallStart"));
    assert_eq!(events.last().map(String::as_str), Some("CallFailed"));
    assert!(
        events.iter().any(|e| e.starts_with("ConnectFailed #1")),
        "{events:?}"
    );
}

/// Waits (in real time, at most 5 s) until `cond` holds; fails the test otherwise.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test]
async fn kept_warm_origin_has_a_connection_before_the_first_call_and_after_a_drop() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], None).await;
    let pool = setup.pool();
    let origin = pool.origin(&setup.url("a.test")).unwrap();

    pool.keep_warm(&origin, 1);
    eventually("a warm connection", || pool.stats().idle == 1).await;
    assert_eq!(stats[0].connections(), 1);

    let (status, _, _, source) = fetch(&pool, &setup.url("a.test"), "/").await;
    assert_eq!(
        (status, source),
        (200, Source::Pool),
        "the first call found it warm"
    );

    // The server drops it: the pool opens another without being asked.
    stats[0].drop_connections();
    eventually("a replacement", || {
        stats[0].connections() == 2 && pool.stats().idle == 1
    })
    .await;
    assert_eq!(pool.stats().connections, 1);

    pool.keep_warm(&origin, 0);
    stats[0].drop_connections();
    eventually("the old one gone", || pool.stats().connections == 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(stats[0].connections(), 2, "no more warm-ups once stopped");
}

/// Dials that fail at once: no socket, so paused time runs the backoff exactly.
struct Refuse;

impl fastfallback_net::Dial for Refuse {
    fn dial(
        &self,
        _: SocketAddr,
        _: &fastfallback_net::SocketOptions,
    ) -> fastfallback_net::Dialing {
        Box::pin(std::future::ready(Err(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))))
    }
}

/// Records when each warm-up attempt started, on tokio's (paused) clock.
#[derive(Clone, Default)]
struct Starts(Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>);

impl ConnectionListener for Starts {
    fn event(&self, event: &ConnectionEvent) {
        if matches!(event, ConnectionEvent::ConnectStart { .. }) {
            self.0.lock().unwrap().push(tokio::time::Instant::now());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn failed_warm_up_backs_off_doubling_with_jitter_up_to_the_cap() {
    let connector = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(StaticResolver::new())
        .dialer(Refuse)
        .build()
        .unwrap();
    let options = PoolOptions {
        warm_backoff: Duration::from_secs(1),
        warm_backoff_max: Duration::from_secs(8),
        ..PoolOptions::default()
    };
    let starts = Starts::default();
    let pool = Pool::with_listener(connector, options, starts.clone());
    let origin = pool.origin("http://192.0.2.1:80").unwrap();

    pool.keep_warm(&origin, 1);
    tokio::time::sleep(Duration::from_secs(60)).await;
    pool.keep_warm(&origin, 0);

    let times = starts.0.lock().unwrap().clone();
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    // 1, 2, 4, 8, 8, 8… seconds, each ±20 %.
    assert!(gaps.len() >= 6, "{gaps:?}");
    for (i, gap) in gaps.iter().enumerate() {
        let nominal = f64::from(1u32 << i.min(3));
        assert!(
            (0.8 * nominal..1.2 * nominal).contains(gap),
            "wait {i} was {gap:.3} s, nominal {nominal} s ±20 %: {gaps:?}"
        );
    }
    assert!(
        gaps.windows(2).any(|w| w[0] != w[1]),
        "jitter varies the waits: {gaps:?}"
    );
}

#[tokio::test]
async fn send_takes_the_origin_from_an_absolute_uri_and_keeps_its_path() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H1], None).await;
    let pool = setup.pool();
    let uri = format!("{}/bytes/3", setup.url("a.test"));

    let response = pool
        .send(http::Request::get(uri.as_str()).body(Bytes::new()).unwrap())
        .await
        .unwrap();

    assert_eq!(response.into_body().bytes().await.unwrap().as_ref(), b"xxx");
    assert_eq!(stats[0].requests(), 1);
    assert!(pool.origin("ftp://a.test").is_err());
    assert!(
        pool.origin("a.test:443").is_err(),
        "plain TCP is not an HTTP origin"
    );
}

/// ::1 answers TLS 150 ms late, 127.0.0.1 at once; the IPv6 attempt starts first and loses to
/// IPv4 50 ms later. Returns the pool's connection count and the slow server's open
/// connections once the loser had time to finish.
async fn race_with_a_slow_ipv6_loser(spare: SpareWinners) -> (usize, usize) {
    let tls = TlsMaterial::new(&["a.test".to_owned()], &[]).unwrap();
    let v6 = TcpListener::bind("[::1]:0").await.unwrap();
    let port = v6.local_addr().unwrap().port();
    let v4 = TcpListener::bind((ip(V4), port)).await.unwrap();
    let options = |delay| HttpOptions {
        tls: Some(tls.with_alpn(&[H2.to_vec()])),
        accept_delay: delay,
        ..HttpOptions::default()
    };
    let slow = serve(v6, options(Some(Duration::from_millis(150))));
    serve(v4, options(None));
    let pool = dual_stack_pool(&tls, FallbackPolicy::builder().spare_winners(spare));
    let url = format!("https://a.test:{port}");
    let (status, _, _, source) = fetch(&pool, &url, "/").await;
    assert_eq!((status, source), (200, Source::New));
    tokio::time::sleep(Duration::from_millis(400)).await;
    (pool.stats().connections, slow.open())
}

#[tokio::test]
async fn losing_h2_attempt_that_still_connects_is_pooled_only_when_spare_winners_are_kept() {
    assert_eq!(
        race_with_a_slow_ipv6_loser(SpareWinners::Close).await,
        (1, 0)
    );
    assert_eq!(
        race_with_a_slow_ipv6_loser(SpareWinners::Pool).await,
        (2, 1)
    );
}

/// A dialer whose IPv6 connects finish 150 ms late: the IPv6 loser is still in its TCP step
/// when the race ends.
struct SlowIpv6;

impl fastfallback_net::Dial for SlowIpv6 {
    fn dial(
        &self,
        target: SocketAddr,
        _options: &fastfallback_net::SocketOptions,
    ) -> fastfallback_net::Dialing {
        Box::pin(async move {
            if target.is_ipv6() {
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            let stream = tokio::net::TcpStream::connect(target).await?;
            Ok(fastfallback_net::Transport::Tcp(stream))
        })
    }
}

/// A loser kept as a spare while still in its TCP step finishes TCP and TLS after the race
/// and is pooled: the spare keeps what its TLS step needs (the origin) although the race
/// that kept it has ended.
#[tokio::test]
async fn losing_attempt_still_in_tcp_finishes_tls_after_the_race_and_is_pooled() {
    let tls = TlsMaterial::new(&["a.test".to_owned()], &[]).unwrap();
    let v6 = TcpListener::bind("[::1]:0").await.unwrap();
    let port = v6.local_addr().unwrap().port();
    let v4 = TcpListener::bind((ip(V4), port)).await.unwrap();
    let options = || HttpOptions {
        tls: Some(tls.with_alpn(&[H2.to_vec()])),
        ..HttpOptions::default()
    };
    serve(v6, options());
    serve(v4, options());
    let policy = FallbackPolicy::builder().spare_winners(SpareWinners::Pool);
    let connector = dual_stack_connector(&tls, policy).dialer(SlowIpv6);
    let pool = Pool::new(connector.build().unwrap());
    let url = format!("https://a.test:{port}");
    let (status, _, _, source) = fetch(&pool, &url, "/").await;
    assert_eq!((status, source), (200, Source::New));
    eventually("the IPv6 spare pooled", || pool.stats().connections == 2).await;
}

#[tokio::test]
async fn the_pool_is_a_tower_service_of_requests_over_http1_and_h2() {
    // A tower stack over the pool, with no type annotation: `ready()` infers the request type
    // because `Pool` serves one (`Request<RequestBody>`).
    use tower::{Service, ServiceExt};
    for alpn in [H1, H2] {
        let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
        let stats = setup.serve(&[V4], &[alpn], None).await;
        let mut stack = setup.pool().map_err(|e| e.to_string());
        for _ in 0..2 {
            let uri = format!("{}/bytes/2", setup.url("a.test"));
            let request = http::Request::get(uri.as_str())
                .body(RequestBody::empty())
                .unwrap();
            let response = stack.ready().await.unwrap().call(request).await.unwrap();
            let expected = if alpn == H2 {
                http::Version::HTTP_2
            } else {
                http::Version::HTTP_11
            };
            assert_eq!(response.version(), expected);
            assert_eq!(response.into_body().bytes().await.unwrap().as_ref(), b"xx");
        }
        assert_eq!(
            stats[0].connections(),
            1,
            "{alpn:?}: one connection for both requests"
        );
    }
}

/// A request body sent as it is produced: `chunks` data frames, then trailers when asked.
fn streamed_body(
    chunks: Vec<Bytes>,
    trailer: bool,
) -> impl http_body::Body<Data = Bytes, Error = std::io::Error> + Send + 'static {
    let mut frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = chunks
        .into_iter()
        .map(|c| Ok(http_body::Frame::data(c)))
        .collect();
    if trailer {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("abc"));
        frames.push(Ok(http_body::Frame::trailers(trailers)));
    }
    // Yield between frames, so the body really arrives over time.
    let stream = futures::stream::iter(frames).then(|f| async move {
        tokio::task::yield_now().await;
        f
    });
    http_body_util::StreamBody::new(stream)
}

#[tokio::test]
async fn a_streamed_request_body_reaches_the_server_over_http1_and_h2() {
    // Through `Pool::send_body` (any body type) and through the tower `Service` (the body
    // wrapped in a `RequestBody`, still streamed).
    for (alpn, through_service) in [(H1, false), (H2, false), (H1, true), (H2, true)] {
        let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
        setup.serve(&[V4], &[alpn], None).await;
        let pool = setup.pool();
        // 1 MiB: far past HTTP/2's initial 64 KiB window, so the pump must wait for
        // WINDOW_UPDATEs (RFC 9113 §6.9) instead of buffering it all.
        let chunks: Vec<Bytes> = (0..16u8)
            .map(|i| Bytes::from(vec![b'a' + i; 64 << 10]))
            .collect();
        let expected: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        let request = http::Request::post(format!("{}/echo", setup.url("a.test")))
            .body(streamed_body(chunks, alpn == H2))
            .unwrap();
        let response = if through_service {
            use tower::{Service, ServiceExt};
            let mut pool = pool;
            let request = request.map(RequestBody::new);
            pool.ready().await.unwrap().call(request).await.unwrap()
        } else {
            pool.send_body(request).await.unwrap()
        };
        let trailers = response.headers().get("x-trailers").cloned();
        let echoed = response.into_body().bytes().await.unwrap();
        assert_eq!(echoed.len(), expected.len(), "{alpn:?}");
        assert!(
            echoed == expected,
            "{alpn:?}: the body arrived intact and in order"
        );
        if alpn == H2 {
            assert_eq!(
                trailers.unwrap(),
                "x-checksum",
                "HTTP/2 carries the trailers"
            );
        }
    }
}

#[tokio::test]
async fn a_request_body_that_fails_fails_the_exchange_and_the_next_call_still_works() {
    for alpn in [H1, H2] {
        let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
        let stats = setup.serve(&[V4], &[alpn], None).await;
        let pool = setup.pool();
        let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = vec![
            Ok(http_body::Frame::data(Bytes::from_static(b"partial"))),
            Err(std::io::Error::other("the upload source broke")),
        ];
        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
        let request = http::Request::post(format!("{}/echo", setup.url("a.test")))
            .body(body)
            .unwrap();
        let failed = pool.send_body(request).await;
        assert!(
            failed.is_err(),
            "{alpn:?}: {:?}",
            failed.map(|r| r.status())
        );
        let ok = pool
            .send(
                http::Request::get(format!("{}/", setup.url("a.test")))
                    .body(Bytes::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(ok.status(), http::StatusCode::OK);
        let conn = ok.headers()["x-conn"].to_str().unwrap().to_owned();
        // HTTP/1: the broken connection is not reused; HTTP/2: only the stream was reset.
        let want = if alpn == H2 { "1" } else { "2" };
        assert_eq!(conn, want, "{alpn:?}");
        assert_eq!(stats[0].connections(), want.parse::<usize>().unwrap());
    }
}

/// One GET through `pool`: the status and `x-conn`, or the error's text.
async fn try_get(pool: &Pool, url: &str) -> Result<(u16, String), String> {
    let request = http::Request::get(url).body(Bytes::new()).unwrap();
    let response = pool.send(request).await.map_err(|e| e.to_string())?;
    let conn = response.headers()["x-conn"].to_str().unwrap().to_owned();
    let status = response.status().as_u16();
    response
        .into_body()
        .bytes()
        .await
        .map_err(|e| e.to_string())?;
    Ok((status, conn))
}

/// A pool with one call done on connection 1 of a server speaking `alpn` (its stats, the
/// pool, the origin's URL).
async fn one_call_done(alpn: &[u8]) -> (Arc<HttpStats>, Pool, String) {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[alpn], None).await.remove(0);
    let pool = setup.pool();
    let url = setup.url("a.test");
    assert_eq!(
        try_get(&pool, &format!("{url}/")).await,
        Ok((200, "1".to_owned()))
    );
    (stats, pool, url)
}

#[tokio::test]
async fn an_h2_stream_reset_fails_that_exchange_only_and_the_connection_carries_on() {
    let (stats, pool, url) = one_call_done(H2).await;
    let err = try_get(&pool, &format!("{url}/reset")).await.unwrap_err();
    assert_eq!(
        err,
        "HTTP/2: the server reset the stream: stream error received: unexpected internal error encountered"
    );
    // RFC 9113 §5.4.2: a stream error leaves the connection usable.
    assert_eq!(
        try_get(&pool, &format!("{url}/")).await,
        Ok((200, "1".to_owned()))
    );
    assert_eq!(stats.connections(), 1);
}

#[tokio::test]
async fn goaway_mid_stream_fails_the_exchange_and_the_next_call_opens_a_new_connection() {
    let (stats, pool, url) = one_call_done(H2).await;
    let request = http::Request::get(format!("{url}/goaway"))
        .body(Bytes::new())
        .unwrap();
    let response = pool.send(request).await.unwrap();
    assert_eq!(response.status(), 200, "the head arrived before the GOAWAY");
    let err = response.into_body().bytes().await.unwrap_err().to_string();
    assert_eq!(
        err,
        "HTTP/2: the connection broke: stream closed because of a broken pipe"
    );
    // The connection is gone; the pool does not hand it out again.
    assert_eq!(
        try_get(&pool, &format!("{url}/")).await,
        Ok((200, "2".to_owned()))
    );
    assert_eq!(stats.connections(), 2);
}

#[tokio::test]
async fn an_http1_server_that_closes_without_answering_fails_that_exchange_and_is_not_reused() {
    let (stats, pool, url) = one_call_done(H1).await;
    // A POST is not idempotent: it may have been processed, so it is not sent again.
    let post = http::Request::post(format!("{url}/reset"))
        .body(Bytes::new())
        .unwrap();
    let err = pool.send(post).await.unwrap_err().to_string();
    assert_eq!(
        err,
        "HTTP/1.1: connection error: peer closed connection without sending TLS close_notify: \
         https://docs.rs/rustls/latest/rustls/manual/_03_howto/index.html#unexpected-eof"
    );
    assert_eq!(
        try_get(&pool, &format!("{url}/")).await,
        Ok((200, "2".to_owned()))
    );
    assert_eq!(stats.connections(), 2);
}

#[tokio::test]
async fn a_keep_alive_connection_closed_just_as_it_is_reused_is_retried_for_idempotent_requests() {
    // The first connection answers one request, then closes when the next one arrives (its
    // keep-alive ran out as the request was on its way); later connections answer all.
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (port, accepted) = raw_server(move |mut s| {
        let first = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            let mut request = vec![0u8; 4096];
            loop {
                if !s.read(&mut request).await.is_ok_and(|n| n > 0) {
                    return;
                }
                let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if s.write_all(ok).await.is_err() {
                    return;
                }
                if first {
                    // Wait for the next request, then close without answering.
                    let _ = s.read(&mut request).await;
                    return;
                }
            }
        }
    })
    .await;
    let pool = impatient_pool(5_000);
    let url = format!("http://127.0.0.1:{port}/");
    let get = || http::Request::get(url.as_str()).body(Bytes::new()).unwrap();
    let body = |r: http::Response<fastfallback_http::Body>| r.into_body().bytes();
    assert_eq!(
        body(pool.send(get()).await.unwrap())
            .await
            .unwrap()
            .as_ref(),
        b"ok"
    );
    // The GET meets the closing connection and is sent again, on a new one.
    assert_eq!(
        body(pool.send(get()).await.unwrap())
            .await
            .unwrap()
            .as_ref(),
        b"ok"
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn settings_with_zero_concurrent_streams_refuse_the_stream_with_a_clear_error() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    setup.serve(&[V4], &[H2], Some(0)).await;
    let pool = setup.pool();
    let url = setup.url("a.test");
    let err = try_get(&pool, &format!("{url}/")).await.unwrap_err();
    assert_eq!(
        err,
        "HTTP/2: the server reset the stream: stream error received: refused stream before \
         processing any application logic"
    );
}

/// A pool for plain `http://` origins with a short response timeout.
fn impatient_pool(timeout_ms: u64) -> Pool {
    let connector = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(StaticResolver::new())
        .build()
        .unwrap();
    Pool::with_options(
        connector,
        PoolOptions {
            response_timeout: Some(Duration::from_millis(timeout_ms)),
            ..PoolOptions::default()
        },
    )
}

/// A raw TCP server on 127.0.0.1: `behave` gets each accepted connection. Returns the port
/// and a count of accepted connections.
async fn raw_server<F, Fut>(behave: F) -> (u16, Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (listener, port) = bind().await;
    (port, serve_each(listener, behave))
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_times_out_and_is_not_reused() {
    let (port, accepted) = raw_server(|mut s| async move {
        let mut sink = vec![0u8; 4096];
        while s.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    let pool = impatient_pool(300);
    let url = format!("http://127.0.0.1:{port}/");
    for round in 1..=2 {
        let err = try_get(&pool, &url).await.unwrap_err();
        assert_eq!(err, "no response head within 300 ms of sending the request");
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            round,
            "a timed-out HTTP/1 connection is closed, never reused"
        );
    }
    assert_eq!(pool.stats().connections, 0);
}

#[tokio::test]
async fn a_slowloris_response_head_times_out() {
    let (port, _) = raw_server(|mut s| async move {
        let mut request = vec![0u8; 4096];
        let _ = s.read(&mut request).await;
        for b in b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok" {
            if s.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let pool = impatient_pool(300);
    let err = try_get(&pool, &format!("http://127.0.0.1:{port}/"))
        .await
        .unwrap_err();
    assert_eq!(err, "no response head within 300 ms of sending the request");
}

#[tokio::test]
async fn a_silent_h2_stream_times_out_alone_and_the_connection_carries_on() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], None).await;
    let pool = Pool::with_options(
        setup.connector(FallbackPolicy::default()),
        PoolOptions {
            response_timeout: Some(Duration::from_millis(300)),
            ..PoolOptions::default()
        },
    );
    let url = setup.url("a.test");
    let err = try_get(&pool, &format!("{url}/silent")).await.unwrap_err();
    assert_eq!(err, "no response head within 300 ms of sending the request");
    assert_eq!(
        try_get(&pool, &format!("{url}/")).await,
        Ok((200, "1".to_owned()))
    );
    assert_eq!(stats[0].connections(), 1, "only the stream was given up");
}

/// Runs `n` concurrent `GET path` calls through `pool.send` and returns every outcome: the
/// status and `x-conn`, or the error's text.
async fn concurrent_gets(
    pool: &Pool,
    url: &str,
    path: &str,
    n: usize,
) -> Vec<Result<(u16, String), String>> {
    let calls = (0..n).map(|_| {
        let (pool, url) = (pool.clone(), format!("{url}{path}"));
        tokio::spawn(async move { try_get(&pool, &url).await })
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect()
}

/// Every outcome was a 200; the errors otherwise (with how many there were).
fn assert_all_ok(outcomes: &[Result<(u16, String), String>]) {
    let failed: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} failed, first: {:?}",
        failed.len(),
        outcomes.len(),
        failed.first()
    );
    assert!(
        outcomes
            .iter()
            .all(|o| o.as_ref().is_ok_and(|(s, _)| *s == 200))
    );
}

/// RFC 9113 §5.1.2: a server that allows 10 concurrent streams refuses the rest with
/// REFUSED_STREAM, which §8.7 says were not processed. The first connection's requests go
/// out before its SETTINGS arrive; the refused ones are sent again and wait for a stream.
#[tokio::test]
async fn hundred_calls_to_a_new_origin_allowing_ten_streams_all_succeed() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], Some(10)).await;
    let pool = setup.pool();

    let outcomes = concurrent_gets(&pool, &setup.url("a.test"), "/sleep/20", 100).await;

    assert_all_ok(&outcomes);
    assert!(
        stats[0].connections() <= 2,
        "{} connections",
        stats[0].connections()
    );
    assert_eq!(
        stats[0].requests(),
        100 + (outcomes.len() - 100),
        "each call answered once"
    );
}

/// With the limit learned on an earlier connection, a new connection opens no more streams
/// than it before its own SETTINGS arrive, so nothing is refused (the first call's connection
/// is busy, so the burst opens a second one).
#[tokio::test]
async fn a_new_connection_starts_from_the_stream_limit_its_origin_set_before() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], Some(10)).await;
    let pool = setup.pool();
    let url = setup.url("a.test");
    try_get(&pool, &format!("{url}/")).await.unwrap();
    // The SETTINGS frame is read with the answer to the pool's first PING.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Ten long calls fill the first connection.
    let busy = {
        let (pool, url) = (pool.clone(), url.clone());
        tokio::spawn(async move { concurrent_gets(&pool, &url, "/sleep/300", 10).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;

    // Each call counts the connections it was handed: a refused stream sent once more would
    // be handed a second one.
    let acquired = Arc::new(AcquiredCount::default());
    let origin = pool.origin(&url).unwrap();
    let calls = (0..100).map(|_| {
        let (pool, origin, acquired) = (pool.clone(), origin.clone(), Arc::clone(&acquired));
        tokio::spawn(async move {
            let call = Call::default().listener(SharedCount(acquired));
            let exchange = pool.exchange_with(&origin, call).await?;
            let response = exchange.send(get("/sleep/20")).await?;
            let status = response.status().as_u16();
            response.into_body().bytes().await?;
            Ok::<_, ExchangeError>(status)
        })
    });
    let outcomes = futures::future::join_all(calls).await;

    assert!(outcomes.into_iter().all(|o| matches!(o, Ok(Ok(200)))));
    assert_all_ok(&busy.await.unwrap());
    assert_eq!(
        acquired.0.load(std::sync::atomic::Ordering::SeqCst),
        100,
        "one connection per call: none of its streams was refused and sent again"
    );
    assert_eq!(stats[0].requests(), 1 + 10 + 100, "nothing sent twice");
    assert_eq!(stats[0].connections(), 2);
}

/// How many times calls were handed a connection (`CallEvent::ConnectionAcquired`).
#[derive(Default)]
struct AcquiredCount(std::sync::atomic::AtomicUsize);

/// A call's listener adding to a shared [`AcquiredCount`].
struct SharedCount(Arc<AcquiredCount>);

impl EventListener for SharedCount {
    fn event(&self, event: &CallEvent) {
        if matches!(event, CallEvent::ConnectionAcquired { .. }) {
            self.0.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// A GOAWAY naming stream 0 as the last processed (RFC 9113 §6.8) while 100 calls share the
/// first connection of a new origin: none of them was processed, so each is sent again, on
/// one new connection. On the multi-thread runtime the GOAWAY can also close the connection
/// between the offer of a stream and its use; those calls look again too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_naming_no_stream_sends_a_hundred_waiting_calls_to_one_new_connection() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup
        .serve_h2_with(HttpOptions {
            goaway_first: 1,
            ..HttpOptions::default()
        })
        .await;
    let pool = setup.pool();

    let outcomes = concurrent_gets(&pool, &setup.url("a.test"), "/", 100).await;

    assert_all_ok(&outcomes);
    assert!(
        outcomes
            .iter()
            .all(|o| o.as_ref().is_ok_and(|(_, c)| c == "2"))
    );
    assert_eq!(
        stats.connections(),
        2,
        "the one that went away, and one more"
    );
    assert_eq!(stats.requests(), 100);
}

/// When the call leading a single flight is dropped mid-connect, one waiter takes the connect
/// over and the others keep waiting for it (each used to connect on its own).
#[tokio::test]
async fn a_dropped_leader_hands_its_connect_to_one_waiter() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup
        .serve_h2_with(HttpOptions {
            // Every handshake takes a while: the leader is dropped during its own.
            accept_delay: Some(Duration::from_millis(150)),
            ..HttpOptions::default()
        })
        .await;
    let pool = setup.pool();
    let url = setup.url("a.test");
    let leader = {
        let (pool, url) = (pool.clone(), url.clone());
        tokio::spawn(async move { try_get(&pool, &format!("{url}/")).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    let waiters = {
        let (pool, url) = (pool.clone(), url.clone());
        tokio::spawn(async move { concurrent_gets(&pool, &url, "/", 50).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!((pool.stats().watching, pool.stats().flights), (51, 1));

    leader.abort();
    let outcomes = waiters.await.unwrap();

    assert_all_ok(&outcomes);
    assert_eq!(
        stats.connections(),
        2,
        "the dropped leader's and the one a waiter took over"
    );
    assert_eq!((pool.stats().watching, pool.stats().flights), (0, 0));
}

/// An origin made by another pool is keyed by the pool it is used with: the connection it
/// gets is keyed as this pool's own origins are, so they share it.
#[tokio::test]
async fn an_origin_from_another_pool_is_keyed_by_the_pool_that_connects_it() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H2], None).await;
    let url = setup.url("a.test");
    // Pool A would go through a proxy: its keys name it.
    let proxied = {
        let mut roots = RootCertStore::empty();
        roots.add(setup.tls.ca_der()).unwrap();
        let proxy = fastfallback_route::Proxy::http("proxy.test".parse().unwrap(), 3128);
        let connector = Connector::builder()
            .resolver(setup.resolver.clone())
            .root_certificates(roots)
            .proxy(proxy)
            .build()
            .unwrap();
        Pool::new(connector)
    };
    let foreign = proxied.origin(&url).unwrap();
    let pool = setup.pool();

    let first = pool.exchange(&foreign).await.unwrap();
    first
        .send(get("/"))
        .await
        .unwrap()
        .into_body()
        .bytes()
        .await
        .unwrap();
    let own = pool.origin(&url).unwrap();
    let second = pool.exchange(&own).await.unwrap();

    assert_eq!(
        second.source(),
        Source::Pool,
        "one key for both: a direct connection"
    );
    assert_eq!(stats[0].connections(), 1);
    assert_ne!(foreign.key(), own.key());
}

/// A raw HTTP/2 server over TLS that tries to push a resource with every response, and
/// counts the pushes its h2 crate accepted (`settings`: applied to its builder).
async fn pushing_server(
    setup: &mut Setup,
    settings: impl Fn(&mut h2::server::Builder) + Send + Sync + 'static,
    answer: bool,
) -> Arc<std::sync::atomic::AtomicUsize> {
    let listener = listen(&[V4]).await.remove(0);
    setup.port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(setup.tls.with_alpn(&[H2.to_vec()]));
    let pushed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&pushed);
    let settings = Arc::new(settings);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, counter, settings) = (
                acceptor.clone(),
                Arc::clone(&counter),
                Arc::clone(&settings),
            );
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut builder = h2::server::Builder::new();
                settings(&mut builder);
                let Ok(mut conn) = builder.handshake::<_, Bytes>(tls).await else {
                    return;
                };
                while let Some(Ok((_request, mut respond))) = conn.accept().await {
                    let promise = http::Request::get("https://a.test/pushed")
                        .body(())
                        .unwrap();
                    if let Ok(mut push) = respond.push_request(promise) {
                        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let head = http::Response::new(());
                        if let Ok(mut tx) = push.send_response(head, false) {
                            let _ = tx.send_data(Bytes::from(vec![0u8; 1024]), true);
                        }
                    }
                    if answer {
                        let head = http::Response::builder().header("x-conn", "1");
                        let _ = respond.send_response(head.body(()).unwrap(), true);
                    } else {
                        // Hold the stream open, unanswered.
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                            drop(respond);
                        });
                    }
                }
            });
        }
    });
    pushed
}

/// The pool refuses server push (SETTINGS_ENABLE_PUSH = 0, RFC 9113 §6.5.2): a server that
/// pushes with every response cannot, so pushed responses never pile up on the connection.
#[tokio::test]
async fn server_push_is_refused_so_pushed_responses_never_pile_up() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let pushed = pushing_server(&mut setup, |_| {}, true).await;
    let pool = setup.pool();
    let url = setup.url("a.test");

    for _ in 0..20 {
        assert_eq!(
            try_get(&pool, &format!("{url}/")).await.map(|r| r.0),
            Ok(200).map_err(|e: String| e)
        );
    }

    assert_eq!(
        pushed.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no push was accepted"
    );
}

/// A request body that notes when it is dropped, endless (it never ends by itself).
fn endless_body(
    dropped: Arc<std::sync::atomic::AtomicBool>,
) -> impl http_body::Body<Data = Bytes, Error = std::io::Error> + Send + 'static {
    struct Flag(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let flag = Flag(dropped);
    let chunks = futures::stream::repeat_with(move || {
        let _held = &flag;
        Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from(vec![b'u'; 16 * 1024])))
    });
    http_body_util::StreamBody::new(chunks)
}

/// An upload stalled on a flow-control window the server never opens (RFC 9113 §6.9) ends
/// when the exchange is dropped: its body is dropped with it, not kept by a task until the
/// connection closes.
#[tokio::test]
async fn an_upload_stalled_on_a_closed_window_ends_when_its_exchange_is_dropped() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    pushing_server(
        &mut setup,
        |b| {
            b.initial_window_size(0);
        },
        false,
    )
    .await;
    let pool = setup.pool();
    let origin = pool.origin(&setup.url("a.test")).unwrap();
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let exchange = pool.exchange(&origin).await.unwrap();
    let request = http::Request::post("/upload")
        .body(endless_body(Arc::clone(&dropped)))
        .unwrap();

    let sent = tokio::time::timeout(Duration::from_millis(200), exchange.send_body(request)).await;
    assert!(sent.is_err(), "the server never answers");
    assert!(pool.stats().connections == 1);

    // The abort lands on the pump task's next poll: give the runtime a few turns.
    for _ in 0..100 {
        if dropped.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        dropped.load(std::sync::atomic::Ordering::SeqCst),
        "the upload still holds its body"
    );
}

/// A server that breaks HTTP/2 (a DATA frame on stream 0, a connection error by RFC 9113
/// §6.1) makes h2 on our side close the connection with GOAWAY(PROTOCOL_ERROR): the error
/// says so, not that the server sent a GOAWAY.
#[tokio::test]
async fn our_own_goaway_for_a_protocol_error_is_not_reported_as_the_servers() {
    let (port, _) = raw_server(|mut s| async move {
        // The client's preface (24 bytes) and its SETTINGS frame come first.
        let mut preface = [0u8; 24];
        if s.read_exact(&mut preface).await.is_err() {
            return;
        }
        // An empty SETTINGS frame, then DATA on stream 0.
        let settings = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
        let data_on_stream_0 = [0, 0, 1, 0x0, 0, 0, 0, 0, 0, b'x'];
        let _ = s.write_all(&settings).await;
        let _ = s.write_all(&data_on_stream_0).await;
        let mut sink = vec![0u8; 4096];
        while s.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    let connector = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(StaticResolver::new())
        .build()
        .unwrap();
    let options = PoolOptions {
        prior_knowledge_h2: true,
        ..PoolOptions::default()
    };
    let pool = Pool::with_options(connector, options);

    let err = try_get(&pool, &format!("http://127.0.0.1:{port}/"))
        .await
        .unwrap_err();

    assert!(!err.contains("the server sent GOAWAY"), "{err}");
    assert!(
        err.starts_with("HTTP/2: the connection was closed from this side"),
        "{err}"
    );
}

/// Bad input (crates/net/tests/bad_input.rs has the driver's): a `tcp://` origin is refused
/// by the pool, and the error does not repeat its password.
#[tokio::test]
async fn a_tcp_origin_given_to_the_pool_is_refused_without_its_password() {
    let connector = Connector::builder()
        .resolver(StaticResolver::new())
        .build()
        .unwrap();
    let pool = Pool::new(connector);
    let Err(err) = pool.origin("tcp://user:hunter2-secret@127.0.0.1:80") else {
        panic!("a tcp:// origin is not an HTTP origin");
    };
    let text = err.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        text.contains("\"tcp://127.0.0.1:80\" is not an http:// or https:// origin"),
        "{text}"
    );
}

/// HTTP/1 calls far more than the idle limit keeps, many at once, round after round: every
/// call succeeds. A connection that comes free while calls race is offered to one of them
/// mid-race, straight from the response that just ended; its sender may not be ready yet (the
/// connection's task is still finishing that response), and sending on it then failed with
/// hyper's "connection was not ready". A request waits until its HTTP/1 sender is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_bursts_beyond_the_idle_limit_all_succeed() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let _stats = setup.serve(&[V4], &[H1], None).await;
    let pool = setup.pool();
    let origin = pool.origin(&setup.url("a.test")).unwrap();
    let call = || async {
        let exchange = pool.exchange(&origin).await?;
        let response = exchange.send(get("/")).await?;
        let body = response.into_body().bytes().await?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(body)
    };
    // A new call starts as each one ends, so calls race while connections come free.
    let results: Vec<_> = futures::stream::iter(0..2048)
        .map(|_| call())
        .buffer_unordered(256)
        .collect()
        .await;
    for r in results {
        let body = r.unwrap_or_else(|e| panic!("a call failed: {e}"));
        assert_eq!(body.as_ref(), b"ok");
    }
}

/// The default idle limit keeps what a burst of HTTP/1 calls opened: the next burst of the
/// same size opens nothing. (With OkHttp's 5, the idle monitor closed all but 5, and every
/// burst reopened the rest.)
#[tokio::test]
async fn an_http1_burst_finds_the_connections_the_last_burst_left_idle() {
    let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
    let stats = setup.serve(&[V4], &[H1], None).await;
    let pool = setup.pool();
    let origin = pool.origin(&setup.url("a.test")).unwrap();
    let burst = || {
        let calls = (0..32).map(|_| {
            let (pool, origin) = (pool.clone(), origin.clone());
            tokio::spawn(async move {
                // Every call holds its connection until all 32 have one.
                let exchange = pool.exchange(&origin).await.unwrap();
                let response = exchange.send(get("/sleep/50")).await.unwrap();
                response.into_body().bytes().await.unwrap()
            })
        });
        futures::future::join_all(calls)
    };
    for r in burst().await {
        assert_eq!(r.unwrap().as_ref(), b"ok");
    }
    let opened = stats[0].connections();
    assert!(opened >= 32, "one connection per call in flight: {opened}");
    // Give the idle monitor time to close what it would close.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(pool.stats().idle, opened);
    for r in burst().await {
        assert_eq!(r.unwrap().as_ref(), b"ok");
    }
    assert_eq!(
        stats[0].connections(),
        opened,
        "the second burst opened no connection"
    );
}

/// A request is sent to the exchange's origin whatever its URI names: its path goes as it
/// is, and the origin's `host:port` as HTTP/1's `host` header and HTTP/2's `:authority`.
#[tokio::test]
async fn a_request_naming_another_host_goes_to_the_origin_with_its_path_query_and_the_origins_authority()
 {
    for protocol in [H1, H2] {
        let mut setup = Setup::new(&["a.test"]).resolve("a.test", &[V4]);
        setup.serve(&[V4], &[protocol], None).await;
        let pool = setup.pool();
        let origin = pool.origin(&setup.url("a.test")).unwrap();
        let exchange = pool.exchange(&origin).await.unwrap();
        let request = http::Request::post("https://elsewhere.example:8443/echo?x=1")
            .body(Bytes::from_static(b"sent"))
            .unwrap();

        let response = exchange.send(request).await.unwrap();

        let host = response.headers()["x-host"].to_str().unwrap().to_owned();
        assert_eq!(host, format!("a.test:{}", setup.port), "{protocol:?}");
        let target = response.headers()["x-target"].to_str().unwrap().to_owned();
        assert_eq!(
            target, "/echo?x=1",
            "{protocol:?}: the path and the query were kept"
        );
        let body = response.into_body().bytes().await.unwrap();
        assert_eq!(&body[..], b"sent", "{protocol:?}: the body was kept");
    }
}
