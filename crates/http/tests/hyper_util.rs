//! The engine under hyper-util's legacy `Client`: `HyperConnector` against real loopback
//! servers (hyper's HTTP/1 server and the h2 crate's HTTP/2 server over TLS with ALPN), with
//! the race's report read back from each response.

use std::net::IpAddr;

use bytes::Bytes;
use fastfallback_http::{ConnectInfo, HyperConnector};
use fastfallback_net::{Connectivity, Connector, StaticResolver};
use fastfallback_testkit::loopback::{closed_port, https_server};
use fastfallback_testnet::TlsMaterial;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

fn client(tls: &TlsMaterial) -> Client<HyperConnector, Empty<Bytes>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    let localhost: IpAddr = "127.0.0.1".parse().unwrap();
    let connector = Connector::builder()
        .connectivity(Connectivity::DUAL_STACK)
        .resolver(StaticResolver::new().with("a.test", [localhost]))
        .root_certificates(roots)
        .build()
        .unwrap();
    Client::builder(TokioExecutor::new()).build(HyperConnector::new(connector))
}

/// Two GETs through one client: (HTTP version, body, the report's winning route, the server's
/// connection numbers).
async fn two_gets(alpn: &[u8]) -> (http::Version, Bytes, String, [String; 2], usize) {
    let tls = TlsMaterial::new(&["a.test".to_owned()], &[]).unwrap();
    let (port, stats) = https_server(tls.with_alpn(&[alpn.to_vec()])).await;
    let client = client(&tls);
    let uri: http::Uri = format!("https://a.test:{port}/").parse().unwrap();
    let mut conns = [String::new(), String::new()];
    let mut last = None;
    for (i, c) in conns.iter_mut().enumerate() {
        if i > 0 {
            // hyper-util returns an HTTP/1 connection to its pool from a background task once
            // the response body has been read to its end (below). 10 ms lets that task run
            // (it needs no I/O, only a turn); without it the second GET could find the pool
            // empty and open a second connection, and `accepted == 1` would fail for reasons
            // that are not the engine's.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let response = client.get(uri.clone()).await.unwrap();
        *c = response.headers()["x-conn"].to_str().unwrap().to_owned();
        let version = response.version();
        let info = response.extensions().get::<ConnectInfo>().cloned().unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        last = Some((version, body, info));
    }
    let (version, body, info) = last.unwrap();
    let report = info.report();
    let winner = report.winning_attempt().unwrap().route.to_string();
    assert_eq!(info.peer_addr().port(), port);
    (version, body, winner, conns, stats.connections())
}

#[tokio::test]
async fn hyper_util_client_speaks_http1_over_the_race_and_reads_its_report() {
    let (version, body, winner, conns, accepted) = two_gets(b"http/1.1").await;
    assert_eq!(version, http::Version::HTTP_11);
    assert_eq!(body.as_ref(), b"ok");
    assert!(winner.starts_with("127.0.0.1:"), "{winner}");
    assert_eq!(
        conns[0], conns[1],
        "hyper-util's pool reused the raced connection"
    );
    assert_eq!(accepted, 1);
}

#[tokio::test]
async fn hyper_util_client_speaks_h2_when_alpn_chose_it() {
    let (version, body, _, conns, accepted) = two_gets(b"h2").await;
    assert_eq!(
        version,
        http::Version::HTTP_2,
        "negotiated_h2 was set from ALPN"
    );
    assert_eq!(body.as_ref(), b"ok");
    assert_eq!(conns[0], conns[1]);
    assert_eq!(accepted, 1);
}

#[tokio::test]
async fn a_failed_race_is_a_connect_error_for_hyper_util() {
    let tls = TlsMaterial::new(&["a.test".to_owned()], &[]).unwrap();
    let port = closed_port();
    let client = client(&tls);
    let err = client
        .get(format!("https://a.test:{port}/").parse().unwrap())
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err:?}");
    let source = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        source.contains("cannot connect to https://a.test"),
        "{source}"
    );
}
