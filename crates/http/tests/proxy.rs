//! The pool through a proxy (the driver's proxy tests: crates/net/tests/proxy.rs): pooled
//! connections are keyed by the proxy, without its credentials, and reused.

use bytes::Bytes;
use fastfallback_http::Pool;
use fastfallback_route::Credentials;
use fastfallback_testkit::loopback::{TlsOrigin, http_proxy};
use fastfallback_testnet::proxy::ProxyOptions;

const SECRET: &str = "s3cret-Pa55";

#[tokio::test]
async fn pooled_connections_through_a_proxy_are_reused_and_keyed_by_it() {
    let origin = TlsOrigin::start().await;
    let (proxy, stats) = http_proxy(ProxyOptions::default()).await;
    let proxy = proxy.with_credentials(Credentials::new("alice", SECRET));
    let pool = Pool::new(origin.connector(&[proxy]));
    let url = format!("https://localhost:{}", origin.port);
    let o = pool.origin(&url).unwrap();
    let key = o.key().proxy().expect("keyed by the proxy").to_owned();
    assert!(key.contains("127.0.0.1") && !key.contains(SECRET), "{key}");
    for _ in 0..2 {
        let request = http::Request::get(format!("{url}/"))
            .body(Bytes::new())
            .unwrap();
        let response = pool.send(request).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response.status(), http::StatusCode::OK);
        response.into_body().bytes().await.unwrap();
    }
    assert_eq!(
        stats.tunnels(),
        1,
        "the second call reused the tunnelled connection"
    );
    assert_eq!(origin.stats.connections(), 1);
}
