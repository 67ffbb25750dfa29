//! A connect that a released connection overtook: the call that raced it takes the released
//! connection, and the connect finishes in the background and joins the pool idle, so the
//! next time two calls are in flight at once the pool has a connection for each (as
//! Chromium's connect jobs and hyper-util's background connects do). Before, it was closed,
//! and an HTTP/1 pool under load opened and closed a connection for most such calls.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fastfallback_http::Pool;
use fastfallback_net::{Connector, Source, StaticResolver};
use fastfallback_testkit::loopback::bind;
use fastfallback_testnet::TlsMaterial;
use fastfallback_testnet::http::{HttpOptions, HttpStats, serve};

/// The server waits this long after accepting a connection before its TLS handshake, so a
/// new connection takes at least this long: long enough for a busy one to be released first.
const SLOW_HANDSHAKE: Duration = Duration::from_millis(300);

/// An HTTP/1.1-only HTTPS server for `origin.test` with a slow handshake, and a pool for it.
async fn setup() -> (Pool, String, Arc<HttpStats>) {
    let tls = TlsMaterial::new(&["origin.test".to_owned()], &[]).unwrap();
    let (listener, port) = bind().await;
    let stats = serve(
        listener,
        HttpOptions {
            tls: Some(tls.with_alpn(&[b"http/1.1".to_vec()])),
            accept_delay: Some(SLOW_HANDSHAKE),
            ..HttpOptions::default()
        },
    );
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    let localhost: IpAddr = "127.0.0.1".parse().unwrap();
    let connector = Connector::builder()
        .resolver(StaticResolver::new().with("origin.test", [localhost]))
        .root_certificates(roots)
        .build()
        .unwrap();
    (
        Pool::new(connector),
        format!("https://origin.test:{port}"),
        stats,
    )
}

fn get(path: &str) -> http::Request<Bytes> {
    http::Request::get(path).body(Bytes::new()).unwrap()
}

#[tokio::test]
async fn an_http1_connect_overtaken_by_a_released_connection_joins_the_pool_idle() {
    let (pool, url, stats) = setup().await;
    let origin = pool.origin(&url).unwrap();
    // Call a holds the first connection.
    let a = pool.exchange(&origin).await.unwrap();
    assert_eq!(stats.connections(), 1);
    // Call b finds it busy and races a connect, which the slow handshake holds up.
    let b = tokio::spawn({
        let (pool, origin) = (pool.clone(), origin.clone());
        async move { pool.exchange(&origin).await.unwrap() }
    });
    tokio::time::sleep(SLOW_HANDSHAKE / 3).await;
    assert_eq!(
        stats.connections(),
        2,
        "b's connect is in its TLS handshake"
    );
    // Call a ends: its connection goes to b, ahead of b's own connect.
    let body = a.send(get("/")).await.unwrap().into_body().bytes().await;
    assert_eq!(body.unwrap().as_ref(), b"ok");
    let b = b.await.unwrap();
    assert_eq!(b.source(), Source::PooledMidRace, "b took a's connection");
    // b's connect finishes on its own and waits in the pool (bounded: the handshake takes
    // 300 ms from its accept, well under the 5 s here).
    let mut waited = Duration::ZERO;
    while pool.stats().idle < 1 && waited < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    assert_eq!(pool.stats().connections, 2, "{:?}", pool.stats());
    assert_eq!(pool.stats().idle, 1, "{:?}", pool.stats());
    // Two calls in flight now need no new connection: b's, and the one its connect made.
    let c = pool.exchange(&origin).await.unwrap();
    assert_eq!(c.source(), Source::Pool);
    assert_eq!(stats.connections(), 2, "nothing new was opened");
    for exchange in [b, c] {
        let body = exchange.send(get("/")).await.unwrap().into_body().bytes();
        assert_eq!(body.await.unwrap().as_ref(), b"ok");
    }
    assert_eq!(stats.requests(), 3);
}
