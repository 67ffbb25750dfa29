//! The pool reads `Alt-Svc` (RFC 7838) from responses into the connector's route memory, so
//! that later races to the origin try its HTTP/3 alternative over QUIC.

use bytes::Bytes;
use fastfallback_http::Pool;
use fastfallback_net::{Connector, StaticResolver};
use fastfallback_route::Address;
use fastfallback_testkit::loopback::{LOCALHOST, https_server, trusting_connector};
use fastfallback_testnet::TlsMaterial;

/// An HTTPS server (h2) for `origin.test` on 127.0.0.1, and a pool whose connector races
/// QUIC when `quic`; the origin's URL.
async fn setup(quic: bool) -> (Pool, String) {
    let tls = TlsMaterial::new(&["origin.test".to_owned()], &[]).unwrap();
    let (port, _) = https_server(tls.with_alpn(&[b"h2".to_vec()])).await;
    (
        Pool::new(connector(&tls, quic)),
        format!("https://origin.test:{port}"),
    )
}

/// A connector that trusts `tls`'s CA, resolves `origin.test` to 127.0.0.1 (no HTTPS
/// record), and races QUIC when `quic`.
fn connector(tls: &TlsMaterial, quic: bool) -> Connector {
    let resolver = StaticResolver::new().with("origin.test", [LOCALHOST]);
    trusting_connector(tls, resolver, quic)
}

async fn get(pool: &Pool, url: &str, path: &str) {
    let origin = pool.origin(url).unwrap();
    let exchange = pool.exchange(&origin).await.unwrap();
    let request = http::Request::get(path).body(Bytes::new()).unwrap();
    let response = exchange.send(request).await.unwrap();
    assert_eq!(response.status(), 200);
}

fn alternatives(pool: &Pool, url: &str) -> Vec<u16> {
    let connector = pool.connector();
    let db = connector.route_database().expect("route memory");
    let origin = Address::parse(url).unwrap();
    db.alternatives(
        connector.network().id,
        &origin,
        fastfallback_net::link::now(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_naming_an_h3_alternative_is_remembered_and_clear_forgets_it() {
    let (pool, url) = setup(true).await;
    get(&pool, &url, "/").await;
    assert!(alternatives(&pool, &url).is_empty());
    get(&pool, &url, "/alt-svc/h3/4433").await;
    assert_eq!(alternatives(&pool, &url), [4433]);
    get(&pool, &url, "/alt-svc/clear").await;
    assert!(alternatives(&pool, &url).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_connector_does_not_race_quic_keeps_no_alternatives() {
    let (pool, url) = setup(false).await;
    get(&pool, &url, "/alt-svc/h3/4433").await;
    assert!(alternatives(&pool, &url).is_empty());
}

/// The upgrade (RFC 7838 §2): the first call goes over TCP, its response names an `h3`
/// alternative on the same port, and the next connection races QUIC there and speaks HTTP/3.
#[cfg(feature = "http3")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h3_alternative_named_by_the_first_response_carries_the_next_connection() {
    let tls = TlsMaterial::new(&["origin.test".to_owned()], &[]).unwrap();
    let (port, tcp) = https_server(tls.with_alpn(&[b"h2".to_vec()])).await;
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let config = tls.quic_server(&[b"h3".to_vec()], false).unwrap();
    let quic = quinn::Endpoint::server(config, at).unwrap();
    let h3 = fastfallback_testnet::http3::serve(quic.clone());
    let connector = connector(&tls, true);
    let url = format!("https://origin.test:{port}");

    // No HTTPS record: the first connection is TCP, whose answer names the alternative.
    let first = Pool::new(connector.clone());
    get(&first, &url, &format!("/alt-svc/h3/{port}")).await;
    assert_eq!(tcp.requests(), 1);
    assert_eq!(h3.requests(), 0);

    // A new connection (another pool on the same connector, so the same route memory).
    let second = Pool::new(connector);
    let origin = second.origin(&url).unwrap();
    let exchange = second.exchange(&origin).await.unwrap();
    assert_eq!(exchange.protocol(), fastfallback_proto::Protocol::Http3);
    let request = http::Request::get("/").body(Bytes::new()).unwrap();
    let response = exchange.send(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_3);
    assert_eq!(h3.requests(), 1);
    assert_eq!(tcp.requests(), 1);
}
