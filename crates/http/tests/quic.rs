//! A connector that races QUIC, given to the pool or to hyper-util. With the `http3` feature
//! the pool speaks HTTP/3 on a QUIC winner (RFC 9114): requests, streamed bodies, reuse and
//! single flight as on HTTP/2. Without it, and always for hyper-util (which reads one byte
//! stream), each says so clearly instead of reading HTTP/1.1 from a QUIC connection.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
#[cfg(not(feature = "http3"))]
use fastfallback_http::ExchangeError;
use fastfallback_http::{HyperConnector, Pool};
use fastfallback_net::{ConnectError, Connector};
use fastfallback_proto::{Alpn, DnsAnswer, HttpsRecord, QueryKind};
use fastfallback_testkit::loopback::{LOCALHOST, https_server, trusting_connector};
use fastfallback_testkit::resolver::FakeDns;
use fastfallback_testnet::TlsMaterial;
use tower_service::Service;

const NAME: &str = "quic.test";
/// Another name of the same server (same address, same certificate).
const OTHER: &str = "other.test";

/// `quic.test` on 127.0.0.1 with `1 . alpn=h3,h2`: an HTTPS server (h2) on a TCP port and a
/// QUIC server (h3) on the same UDP port, which wins the race. A connector racing QUIC, and
/// the origin's URL.
async fn quic_origin() -> (Connector, String, quinn::Endpoint) {
    let (connector, url, quic, _) = h3_origin().await;
    (connector, url, quic)
}

/// [`quic_origin`], its QUIC server speaking HTTP/3, and what that server saw.
async fn h3_origin() -> (
    Connector,
    String,
    quinn::Endpoint,
    Arc<fastfallback_testnet::http3::Http3Stats>,
) {
    let tls = TlsMaterial::new(&[NAME.to_owned(), OTHER.to_owned()], &[]).unwrap();
    let (port, _) = https_server(tls.with_alpn(&[b"h2".to_vec()])).await;
    let config = tls.quic_server(&[b"h3".to_vec()], false).unwrap();
    let at = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let quic = quinn::Endpoint::server(config, at).unwrap();
    let stats = fastfallback_testnet::http3::serve(quic.clone());
    let record = HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: vec![Alpn::H3, Alpn::H2],
        ..Default::default()
    };
    let mut dns = FakeDns::new();
    for name in [NAME, OTHER] {
        dns = dns
            .addresses(name, QueryKind::A, [LOCALHOST])
            .addresses(name, QueryKind::Aaaa, [])
            .answer(
                name,
                QueryKind::Https,
                DnsAnswer::Https(vec![record.clone()]),
            );
    }
    let connector = trusting_connector(&tls, dns, true);
    (connector, format!("https://{NAME}:{port}"), quic, stats)
}

#[cfg(not(feature = "http3"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_race_quic_won_says_it_does_not_speak_http3_yet() {
    let (connector, url, _quic) = quic_origin().await;
    let pool = Pool::new(connector);
    let origin = pool.origin(&url).unwrap();
    let err = match pool.exchange(&origin).await {
        Ok(exchange) => {
            let request = http::Request::get("/").body(Bytes::new()).unwrap();
            exchange
                .send(request)
                .await
                .expect_err("no HTTP/3 in the pool")
        }
        Err(e) => e,
    };
    assert!(
        matches!(err, ExchangeError::Connect(ConnectError::Unsupported(_))),
        "{err:?}"
    );
    assert!(err.to_string().contains("HTTP/3"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyper_connector_refuses_a_connector_that_races_quic() {
    let (connector, url, _quic) = quic_origin().await;
    let mut service = HyperConnector::new(connector);
    let Err(err) = service.call(url.parse().unwrap()).await else {
        panic!("a connection");
    };
    assert!(matches!(err, ConnectError::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("FallbackPolicy::quic"), "{err}");
}

#[cfg(feature = "http3")]
mod http3 {
    use super::*;
    use fastfallback_proto::Protocol;

    async fn get(pool: &Pool, url: &str, path: &str) -> (Protocol, http::Response<Bytes>) {
        let origin = pool.origin(url).unwrap();
        let exchange = pool.exchange(&origin).await.unwrap();
        let protocol = exchange.protocol();
        let request = http::Request::get(path).body(Bytes::new()).unwrap();
        let response = exchange.send(request).await.unwrap();
        let (head, body) = response.into_parts();
        (
            protocol,
            http::Response::from_parts(head, body.bytes().await.unwrap()),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_get_goes_over_http3_when_quic_wins_and_the_connection_is_reused() {
        let (connector, url, _quic, stats) = h3_origin().await;
        let pool = Pool::new(connector);
        let (protocol, first) = get(&pool, &url, "/").await;
        assert_eq!(protocol, Protocol::Http3);
        assert_eq!(first.status(), 200);
        assert_eq!(first.version(), http::Version::HTTP_3);
        assert_eq!(first.body().as_ref(), b"ok");
        let (_, second) = get(&pool, &url, "/").await;
        assert_eq!(
            second.headers()["x-conn"],
            "1",
            "the pooled connection again"
        );
        assert_eq!(stats.connections(), 1);
        assert_eq!(stats.requests(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streamed_request_body_goes_over_http3_and_comes_back() {
        let (connector, url, _quic, _stats) = h3_origin().await;
        let pool = Pool::new(connector);
        let origin = pool.origin(&url).unwrap();
        let exchange = pool.exchange(&origin).await.unwrap();
        let chunks = futures::stream::iter(
            ["over ", "quic, ", "in three"]
                .map(|c| Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from(c)))),
        );
        let body = http_body_util::StreamBody::new(chunks);
        let request = http::Request::post("/echo").body(body).unwrap();
        let response = exchange.send_body(request).await.unwrap();
        assert_eq!(
            response.into_body().bytes().await.unwrap().as_ref(),
            b"over quic, in three"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_http3_connection_is_coalesced_for_a_host_its_certificate_covers() {
        // `other.test` resolves to the same address, and the certificate covers it: its
        // exchange rides the QUIC connection `quic.test` opened (RFC 9114 §3.3).
        let (connector, url, _quic, stats) = h3_origin().await;
        let pool = Pool::new(connector);
        let (protocol, _) = get(&pool, &url, "/").await;
        assert_eq!(protocol, Protocol::Http3);
        let other = url.replace(NAME, OTHER);
        let origin = pool.origin(&other).unwrap();
        let exchange = pool.exchange(&origin).await.unwrap();
        assert_eq!(exchange.source(), fastfallback_net::Source::Coalesced);
        let request = http::Request::get("/").body(Bytes::new()).unwrap();
        let response = exchange.send(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(stats.connections(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hundred_calls_at_once_to_a_new_origin_share_one_http3_connection() {
        // Single flight, as for HTTP/2: the first race's QUIC connection carries them all.
        let (connector, url, _quic, stats) = h3_origin().await;
        let pool = Pool::new(connector);
        let calls = (0..100).map(|_| get(&pool, &url, "/"));
        let answers = futures::future::join_all(calls).await;
        assert!(
            answers
                .iter()
                .all(|(p, r)| *p == Protocol::Http3 && r.status() == 200)
        );
        assert_eq!(
            stats.connections(),
            1,
            "one QUIC connection for a hundred calls"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_421_on_a_coalesced_http3_connection_sends_the_request_again_on_the_hosts_own() {
        // RFC 9110 §15.5.20 over HTTP/3: `/strict` answers 421 to a host its ClientHello did
        // not name. `other.test` rides `quic.test`'s connection, gets 421, and the request
        // goes again on a connection of its own, which that connection is not used for again.
        let (connector, url, _quic, stats) = h3_origin().await;
        let pool = Pool::new(connector);
        get(&pool, &url, "/").await;
        let other = url.replace(NAME, OTHER);
        let origin = pool.origin(&other).unwrap();
        let exchange = pool.exchange(&origin).await.unwrap();
        assert_eq!(exchange.source(), fastfallback_net::Source::Coalesced);
        let request = http::Request::get("/strict").body(Bytes::new()).unwrap();
        let response = exchange.send(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["x-conn"],
            "2",
            "on other.test's own connection"
        );
        assert_eq!(stats.connections(), 2);
        let (_, again) = get(&pool, &other, "/strict").await;
        assert_eq!(again.status(), 200);
        assert_eq!(again.headers()["x-conn"], "2");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_the_server_rejected_unprocessed_over_http3_is_sent_again() {
        // RFC 9114 §4.1.1: H3_REQUEST_REJECTED says the server did not process it.
        let (connector, url, _quic, stats) = h3_origin().await;
        let pool = Pool::new(connector);
        let (protocol, response) = get(&pool, &url, "/reject-once").await;
        assert_eq!(protocol, Protocol::Http3);
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-conn"], "1", "on the same connection");
        assert_eq!(stats.requests(), 1, "the rejected one was not processed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idempotent_request_whose_http3_connection_goes_away_is_sent_again_on_a_new_one() {
        // The server closes the QUIC connection under the first `/close-once` request, as a
        // connection whose path died ends at QUIC's idle timeout. A GET may go again (RFC
        // 9110 §9.2.2), as on HTTP/2: on a new connection, and the server sees it twice.
        let (connector, url, _quic, stats) = h3_origin().await;
        let pool = Pool::new(connector);
        let (protocol, response) = get(&pool, &url, "/close-once").await;
        assert_eq!(protocol, Protocol::Http3);
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-conn"], "2", "on a new connection");
        assert_eq!(stats.requests(), 2);
        assert_eq!(stats.connections(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_post_whose_http3_connection_goes_away_fails_and_is_not_sent_again() {
        // A POST may have been processed: its failure is the caller's, and the next call
        // opens a new connection.
        let (connector, url, _quic, stats) = h3_origin().await;
        let pool = Pool::new(connector);
        let post = http::Request::post(format!("{url}/close-once"))
            .body(Bytes::from_static(b"once"))
            .unwrap();
        let failed = pool.send(post).await;
        assert!(failed.is_err(), "the POST's failure is the caller's");
        assert_eq!(stats.requests(), 1, "sent once");
        let (_, response) = get(&pool, &url, "/").await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-conn"], "2");
    }
}
