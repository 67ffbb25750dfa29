//! HTTP/3 through the pool on the test network (root; the `http3` feature): UDP dropped
//! after the handshake. With a response timeout, the request on the dead QUIC connection
//! times out, that connection takes no more exchanges, and the next call races again: QUIC
//! gets no answer, TCP wins one attempt delay later, and QUIC is remembered broken. Without
//! one, QUIC's idle timeout ends the connection under the request, and a GET is sent again
//! on a new connection, which that race gives to TCP.
#![cfg(feature = "http3")]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use fastfallback_http::{ExchangeError, Pool, PoolOptions};
use fastfallback_net::FallbackPolicy;
use fastfallback_proto::Protocol;
use fastfallback_testkit::wire::*;
use fastfallback_testnet::{DnsZone, HttpsSpec, Match, Rule, ServerKind, TestNet, server_v4};

/// The origin `NAME` on the test network: h2 over TCP and h3 over QUIC on one address, a
/// round trip of `RTT`. Returns the rule that makes that round trip.
fn dual_origin(net: &TestNet) -> Rule {
    let v4 = server_v4(0);
    net.set_dns(
        NAME,
        DnsZone {
            a: vec![v4],
            https: vec![HttpsSpec::service(1).alpn(["h3", "h2"])],
            ..DnsZone::default()
        },
    );
    let at = SocketAddr::new(IpAddr::V4(v4), TLS_PORT);
    let kind = ServerKind::Http {
        alpn: vec![b"h2".to_vec()],
        max_streams: None,
        goaway_first: 0,
    };
    net.serve(at, kind).unwrap();
    let alpn = vec![b"h3".to_vec()];
    net.serve(at, ServerKind::Quic { alpn }).unwrap();
    let delay = Rule::delay(Match::Addr(IpAddr::V4(v4)), half(RTT));
    net.set_rules(vec![delay.clone()]);
    delay
}

/// UDP to the server dies; TCP still works.
fn udp_dies(net: &TestNet, delay: Rule) {
    net.set_rules(vec![
        Rule::blackhole(Match::Any).port(TLS_PORT).udp(),
        delay,
    ]);
}

#[test]
fn udp_dropped_after_the_handshake_times_out_once_then_the_next_call_goes_over_tcp() {
    let Some(net) =
        network("udp_dropped_after_the_handshake_times_out_once_then_the_next_call_goes_over_tcp")
    else {
        return;
    };
    let delay = dual_origin(&net);
    let policy = FallbackPolicy::builder().quic(true).build().unwrap();
    let options = PoolOptions {
        response_timeout: Some(Duration::from_millis(500)),
        ..PoolOptions::default()
    };
    let outcomes = net.block_on_client(async {
        let pool = Pool::with_options(connector(&net, policy), options);
        let origin = pool.origin(&format!("https://{NAME}")).unwrap();
        let call = || async {
            let exchange = pool.exchange(&origin).await?;
            let protocol = exchange.protocol();
            let request = http::Request::get("/").body(Bytes::new()).unwrap();
            let response = exchange.send(request).await?;
            response.into_body().bytes().await?;
            Ok::<_, ExchangeError>(protocol)
        };
        let first = call().await;
        udp_dies(&net, delay);
        let second = call().await;
        let third = call().await;
        let fourth = call().await;
        let connector = pool.connector();
        let db = connector.route_database().expect("route memory");
        let now = fastfallback_net::link::now();
        let broken = db
            .view(connector.network().id, origin.address(), now)
            .is_quic_broken(now);
        (first, second, third, fourth, broken)
    });
    let (first, second, third, fourth, broken) = outcomes;
    assert!(broken, "QUIC lost the third call's race: remembered broken");
    assert_eq!(first.unwrap(), Protocol::Http3);
    assert!(
        matches!(second, Err(ExchangeError::TimedOut(_))),
        "{second:?}"
    );
    assert_eq!(third.unwrap(), Protocol::Http2, "a new race, won over TCP");
    assert_eq!(
        fourth.unwrap(),
        Protocol::Http2,
        "the pooled TCP connection"
    );
}

#[test]
fn without_a_response_timeout_a_get_on_a_dead_quic_connection_goes_again_over_tcp() {
    let Some(net) =
        network("without_a_response_timeout_a_get_on_a_dead_quic_connection_goes_again_over_tcp")
    else {
        return;
    };
    let delay = dual_origin(&net);
    let policy = FallbackPolicy::builder().quic(true).build().unwrap();
    let (first, second) = net.block_on_client(async {
        let pool = Pool::new(connector(&net, policy));
        let get = || async {
            let request = http::Request::get(format!("https://{NAME}/"))
                .body(Bytes::new())
                .unwrap();
            let response = pool.send(request).await?;
            let version = response.version();
            response.into_body().bytes().await?;
            Ok::<_, ExchangeError>(version)
        };
        let first = get().await;
        udp_dies(&net, delay);
        let second = get().await;
        (first, second)
    });
    assert_eq!(first.unwrap(), http::Version::HTTP_3);
    // QUIC's idle timeout (quinn's 30 s) ended the connection under the GET; the GET went
    // again on a new connection, and that race's QUIC attempt got no answer: TCP won.
    assert_eq!(second.unwrap(), http::Version::HTTP_2);
}
