//! A connector that races QUIC, given to the pool or to hyper-util, until the pool speaks
//! HTTP/3: each says so clearly instead of reading HTTP/1.1 from a QUIC connection.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use fastfallback_http::{ExchangeError, HyperConnector, Pool};
use fastfallback_net::{ConnectError, Connector, FallbackPolicy};
use fastfallback_proto::{Alpn, DnsAnswer, HttpsRecord, QueryKind};
use fastfallback_testkit::loopback::{LOCALHOST, bind};
use fastfallback_testkit::resolver::FakeDns;
use fastfallback_testnet::TlsMaterial;
use fastfallback_testnet::http::{HttpOptions, serve};
use tower_service::Service;

const NAME: &str = "quic.test";

/// `quic.test` on 127.0.0.1 with `1 . alpn=h3,h2`: an HTTPS server (h2) on a TCP port and a
/// QUIC server (h3) on the same UDP port, which wins the race. A connector racing QUIC, and
/// the origin's URL.
async fn quic_origin() -> (Connector, String, quinn::Endpoint) {
    let tls = TlsMaterial::new(&[NAME.to_owned()], &[]).unwrap();
    let (listener, port) = bind().await;
    serve(
        listener,
        HttpOptions {
            tls: Some(tls.with_alpn(&[b"h2".to_vec()])),
            ..HttpOptions::default()
        },
    );
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls.with_alpn(&[b"h3".to_vec()]))
            .unwrap();
    let config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let at = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let quic = quinn::Endpoint::server(config, at).unwrap();
    let accepting = quic.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                if let Ok(conn) = incoming.await {
                    conn.closed().await;
                }
            });
        }
    });
    let record = HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: vec![Alpn::H3, Alpn::H2],
        ..Default::default()
    };
    let dns = FakeDns::new()
        .addresses(NAME, QueryKind::A, [LOCALHOST])
        .addresses(NAME, QueryKind::Aaaa, [])
        .answer(NAME, QueryKind::Https, DnsAnswer::Https(vec![record]));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    let connector = Connector::builder()
        .root_certificates(roots)
        .resolver(dns)
        .policy(FallbackPolicy::builder().quic(true).build().unwrap())
        .build()
        .unwrap();
    (connector, format!("https://{NAME}:{port}"), quic)
}

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
